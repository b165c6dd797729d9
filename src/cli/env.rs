//! `quest-runner env` and `quest-runner cache`: a revision's devShell, from the cache or built,
//! and the cache itself. A hit of `env` is answered without starting a runtime.

use std::sync::Arc;

use super::{block_on_interruptible, out, CacheCommand, Context, EnvArgs, Failure, Format};
use crate::devshell::{self, DevShell, DevShells, GcPolicy};

pub(super) fn env(ctx: &Context, args: EnvArgs) -> Result<(), Failure> {
    let shells = Arc::new(DevShells::new(&ctx.state, &ctx.config));
    let req = devshell::Request {
        repo: args.repo,
        rev: args.rev,
        git_ref: args.git_ref,
        attr: args.attr,
    };
    // The hit path: no runtime, no child process.
    let shell = match shells.lookup(&req)? {
        Some(hit) => hit,
        None => block_on_interruptible(async { shells.get(&req).await.map_err(Failure::from) })?,
    };
    print_shell(&shell, args.format)
}

pub fn print_shell(shell: &DevShell, format: Format) -> Result<(), Failure> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = match format {
        Format::Json => writeln!(stdout, "{}", shell_json(shell)),
        Format::Script => match (&shell.env, &shell.script_bytes) {
            (None, _) => writeln!(stdout, "# no devShell: {} has no flake.nix", shell.rev),
            (Some(_), Some(bytes)) => stdout.write_all(bytes),
            (Some(env), None) => std::fs::read(&env.script).and_then(|b| stdout.write_all(&b)),
        },
    };
    written.map_err(super::stdout_failure)
}

pub fn shell_json(shell: &DevShell) -> serde_json::Value {
    let env = shell.env.as_ref();
    serde_json::json!({
        "cache": shell.cache,
        "key": shell.key,
        "rev": shell.rev,
        "attr": shell.attr,
        "system": shell.system,
        "nix_version": shell.nix_version,
        "devshell": if env.is_some() { "present" } else { "none" },
        "script": env.map(|e| &e.script),
        "gcroot": env.map(|e| &e.gcroot),
        "store_path": env.map(|e| &e.store_path),
        "url": env.map(|e| &e.url),
    })
}

pub(super) fn cache(ctx: &Context, command: CacheCommand) -> Result<(), Failure> {
    let shells = DevShells::new(&ctx.state, &ctx.config);
    match command {
        CacheCommand::Ls => {
            for entry in shells.list()? {
                out(serde_json::to_string(&entry).unwrap_or_default())?;
            }
        }
        CacheCommand::Gc {
            max_entries,
            older_than,
            deps_size,
        } => {
            let report = shells.gc(&GcPolicy {
                max_entries,
                older_than,
            })?;
            let mut shown = serde_json::to_value(&report).unwrap_or_default();
            // Objects a running job holds were touched at its start: the newest, kept last.
            if let Some(deps) = crate::deps::DepCache::existing(ctx.state.root()) {
                let limit = deps_size.unwrap_or(ctx.config.deps.cache_size);
                let collected = deps.collect(limit, &Default::default());
                shown["deps"] = serde_json::to_value(collected).unwrap_or_default();
            }
            out(shown.to_string())?;
        }
    }
    Ok(())
}
