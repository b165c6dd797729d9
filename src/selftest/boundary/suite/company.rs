//! The company machine of base trusted runs as root: the stand-in registry behind an HTTPS
//! front, the host's package-manager configuration planted for the agent, and the controls
//! that prove the package managers read through the runner's decider.

use super::super::world::World;
use super::report::ControlReport;
use crate::selftest::model_server::ModelServer;
use crate::selftest::npm_registry::NpmRegistry;
use std::path::PathBuf;

/// The stand-in's HTTPS front and the host configuration a company machine has, planted for
/// the job's agent only.
pub(super) struct Company {
    pub(super) front: crate::selftest::tls_front::TlsFront,
    pub(super) planted: super::super::host_config::Planted,
    /// npm's global config file, as planted.
    pub(super) npmrc: PathBuf,
}

impl Company {
    pub(super) fn new(
        world: &World,
        server: &ModelServer,
        registry: &NpmRegistry,
    ) -> Result<Company, String> {
        let listener = server
            .bind_loopback()
            .map_err(|e| format!("binding the stand-in's HTTPS front: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let mut listeners = vec![listener];
        listeners.extend(server.bind_loopback_v6(port));
        let front = crate::selftest::tls_front::TlsFront::start(
            listeners,
            registry.port,
            &world.path(),
            |cmd| server.confine(cmd),
        )
        .map_err(|e| format!("starting the stand-in's HTTPS front: {e}"))?;
        registry.set_tls_port(front.port);
        let npmrc = super::super::host_config::npm_globalconfig()
            .unwrap_or_else(|| PathBuf::from("/usr/etc/npmrc"));
        let staging = world.path().join("planted");
        std::fs::create_dir_all(&staging).map_err(|e| e.to_string())?;
        let planted = super::super::host_config::Planted::new(
            super::super::host_config::files(&npmrc, &world.token),
            &staging,
        )
        .map_err(|e| format!("planting the host's package-manager config: {e}"))?;
        Ok(Company {
            front,
            planted,
            npmrc,
        })
    }
}

/// The package managers' reads over HTTPS with the company configuration planted (the output
/// of [`attempts::permitted_package_manager_reads`]): the sandbox reads the planted files, npm
/// and pip fail on them without the runner's variables, and with them every client the host
/// has reads through the decider.
pub(super) fn package_manager_controls(
    company: &Company,
    output: &str,
    log: &[String],
    controls: &mut Vec<ControlReport>,
) {
    let mut add = |name: &str, passed: bool, detail: String| {
        controls.push(ControlReport::new(name, passed, detail));
    };
    let planted: Vec<String> = company
        .planted
        .files
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    add(
        "the sandbox reads the planted host config",
        output.contains("PLANTED-NPMRC") && output.contains("PLANTED-PIPCONF"),
        format!("{} (cafile, cert, a company proxy)", planted.join(", ")),
    );
    let without = |client: &str| {
        output
            .lines()
            .find_map(|l| l.strip_prefix(&format!("WITHOUT {client}: ")))
            .unwrap_or("")
            .to_string()
    };
    let (npm, pip) = (without("npm"), without("pip"));
    add(
        "without the runner's variables, npm and pip fail on it",
        npm.contains("CERT") && pip.to_ascii_lowercase().contains("certificate"),
        format!("npm: {npm:?}; pip: {pip:?}"),
    );
    let reads: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("READ "))
        .collect();
    let ok: Vec<&str> = reads
        .iter()
        .filter(|l| l.split(' ').nth(1) == Some("ok"))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let failed: Vec<&&str> = reads
        .iter()
        .filter(|l| l.split(' ').nth(1) == Some("FAILED"))
        .collect();
    let skipped: Vec<&str> = reads
        .iter()
        .filter(|l| l.split(' ').nth(1) == Some("skipped:"))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let host = format!("localhost:{}", company.front.port);
    let wheel = crate::selftest::wheel::file_name(
        crate::selftest::npm_registry::PACKAGE,
        crate::selftest::npm_registry::VERSION,
    );
    let logged = |path: &str| {
        log.iter()
            .any(|l| l.contains(&format!("GET {host} {path}")) && l.ends_with(" allowed"))
    };
    let pkg = crate::selftest::npm_registry::PACKAGE;
    let unlogged: Vec<String> = [
        format!("/{pkg}"),
        format!("/{pkg}/-/{pkg}-"),
        format!("/simple/{pkg}"),
        format!("/files/{wheel}"),
    ]
    .into_iter()
    .filter(|p| !logged(p))
    .collect();
    let through_decider = unlogged.is_empty();
    add(
        "package managers read over HTTPS through the decider despite it",
        output.contains("PM-READS-RAN")
            && ["npm", "npm-install", "pip"].iter().all(|c| ok.contains(c))
            && failed.is_empty()
            && through_decider,
        if failed.is_empty() {
            format!(
                "ok: {}; skipped (not on this host): {}; decider logged the packument, tarball, index and wheel: {}",
                ok.join(", "),
                if skipped.is_empty() { "none".into() } else { skipped.join(", ") },
                if through_decider {
                    "yes".to_string()
                } else {
                    format!("no allowed GET {host} of {}", unlogged.join(", "))
                }
            )
        } else {
            failed
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(" | ")
        },
    );
    if std::env::var_os("QR_BOUNDARY_DEBUG").is_some() {
        eprintln!("--- package manager reads ---\n{output}");
        eprintln!("--- network log ---\n{}", log.join("\n"));
        eprintln!("--- not logged as allowed GETs of {host}: {unlogged:?}");
    }
}
