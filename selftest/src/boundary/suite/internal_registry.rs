//! The company machine of base trusted runs as root: the stand-in registry behind an HTTPS
//! front, the host's package-manager configuration planted for the agent, and the controls
//! that prove the package managers read through the runner's decider.

use crate::boundary::fixture::Fixture;
use crate::boundary::report::ControlReport;
use crate::model_server::ModelServer;
use crate::npm_registry::NpmRegistry;
use std::path::PathBuf;

/// The stand-in's HTTPS front and the host configuration a company machine has, planted for
/// the job's agent only.
pub(super) struct InternalRegistry {
    pub(super) front: crate::tls_front::TlsFront,
    pub(super) planted: crate::boundary::host_config::Planted,
    /// npm's global config file, as planted.
    pub(super) npmrc: PathBuf,
}

impl InternalRegistry {
    pub(super) fn new(
        fixture: &Fixture,
        server: &ModelServer,
        registry: &NpmRegistry,
    ) -> Result<InternalRegistry, String> {
        let listener = server
            .bind_loopback()
            .map_err(|e| format!("binding the stand-in's HTTPS front: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let mut listeners = vec![listener];
        listeners.extend(server.bind_loopback_v6(port));
        let front =
            crate::tls_front::TlsFront::start(listeners, registry.port, &fixture.path(), |cmd| {
                server.confine(cmd)
            })
            .map_err(|e| format!("starting the stand-in's HTTPS front: {e}"))?;
        registry.set_tls_port(front.port);
        let npmrc = crate::boundary::host_config::npm_globalconfig()
            .unwrap_or_else(|| PathBuf::from("/usr/etc/npmrc"));
        let staging = fixture.path().join("planted");
        std::fs::create_dir_all(&staging).map_err(|e| e.to_string())?;
        let planted = crate::boundary::host_config::Planted::new(
            crate::boundary::host_config::files(&npmrc, &fixture.token),
            &staging,
        );
        Ok(InternalRegistry {
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
    internal_registry: &InternalRegistry,
    output: &str,
    log: &[String],
    controls: &mut Vec<ControlReport>,
) {
    controls.push(planted_control(internal_registry, output));
    controls.push(without_variables_control(output));
    let host = format!("localhost:{}", internal_registry.front.port);
    let unlogged = unlogged_reads(&host, log);
    controls.push(reads_control(output, &host, &unlogged));
    if std::env::var_os("QR_BOUNDARY_DEBUG").is_some() {
        eprintln!("--- package manager reads ---\n{output}");
        eprintln!("--- network log ---\n{}", log.join("\n"));
        eprintln!("--- not logged as allowed GETs of {host}: {unlogged:?}");
    }
}

/// The sandbox read the planted host config (npm's global config and `pip.conf`).
fn planted_control(internal_registry: &InternalRegistry, output: &str) -> ControlReport {
    let planted: Vec<String> = internal_registry
        .planted
        .files
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    ControlReport::new(
        "the sandbox reads the planted host config",
        output.contains("PLANTED-NPMRC") && output.contains("PLANTED-PIPCONF"),
        format!("{} (cafile, cert, a company proxy)", planted.join(", ")),
    )
}

/// The planted config is a real obstacle: without the runner's variables, npm and pip fail
/// on its certificate.
fn without_variables_control(output: &str) -> ControlReport {
    let without = |client: &str| {
        output
            .lines()
            .find_map(|l| l.strip_prefix(&format!("WITHOUT {client}: ")))
            .unwrap_or("")
            .to_string()
    };
    let (npm, pip) = (without("npm"), without("pip"));
    ControlReport::new(
        "without the runner's variables, npm and pip fail on it",
        npm.contains("CERT") && pip.to_ascii_lowercase().contains("certificate"),
        format!("npm: {npm:?}; pip: {pip:?}"),
    )
}

/// The stand-in's paths (packument, tarball, index, wheel) with no allowed `GET` of them on
/// `host` in the network log.
fn unlogged_reads(host: &str, log: &[String]) -> Vec<String> {
    let pkg = crate::npm_registry::PACKAGE;
    let wheel = crate::wheel::file_name(pkg, crate::npm_registry::VERSION);
    let logged = |path: &str| {
        log.iter()
            .any(|l| l.contains(&format!("GET {host} {path}")) && l.ends_with(" allowed"))
    };
    [
        format!("/{pkg}"),
        format!("/{pkg}/-/{pkg}-"),
        format!("/simple/{pkg}"),
        format!("/files/{wheel}"),
    ]
    .into_iter()
    .filter(|p| !logged(p))
    .collect()
}

/// Every client the host has read over HTTPS (`READ <client> ok|FAILED|skipped: ...` lines),
/// npm and pip at least, and the decider logged each read (`unlogged`: those it did not).
fn reads_control(output: &str, host: &str, unlogged: &[String]) -> ControlReport {
    let reads: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("READ "))
        .collect();
    let with = |status: &'static str| {
        reads
            .iter()
            .copied()
            .filter(move |l| l.split(' ').nth(1) == Some(status))
    };
    fn client(read: &str) -> &str {
        read.split(' ').next().unwrap_or_default()
    }
    let ok: Vec<&str> = with("ok").map(client).collect();
    let failed: Vec<&str> = with("FAILED").collect();
    let skipped: Vec<&str> = with("skipped:").map(client).collect();
    let through_decider = unlogged.is_empty();
    ControlReport::new(
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
            failed.join(" | ")
        },
    )
}
