// quest-runner's sandbox host for one job's commands (src/jobshell/host.rs starts it).
//
// It does with srt's library, once per job, what `srt --settings <file> -c <command>` did for
// every command: loads and validates the settings, starts srt's network bridges, computes the
// bubblewrap sandbox (its mounts, srt's mandatory write denies found by the scan of the
// checkout, the network namespace and relays, the seccomp helper) and starts it. The command
// it wraps is the runner's executor (src/jobshell/executor.rs), which srt runs in the place of
// its seccomp helper (the `seccomp.argv0` setting) and which runs every command of the job with
// srt's own helper, in this sandbox.
//
//   node sandbox-host.mjs <srt package dir> <srt settings> <executor settings> <listen fd> <lifeline fd>
//
// Descriptor <listen fd>: the job's listening socket, handed to the executor as its fd 3.
// <lifeline fd>: a pipe whose other end only the runner holds; when it closes the sandbox is
// stopped, srt cleans up (bridges, mount points left in the checkout) and this process exits.
// On stdout, one line each, for the runner: `ready` once the executor serves, `failed
// <reason>` if the sandbox could not start or stopped on its own.
//
// When the executor says `stale` (the checkout or a denied file changed in a way srt's wrap
// depends on: src/jobshell/fingerprint.rs), this has srt wrap again — a new scan, new mounts —
// and starts a new sandbox on the same socket; the old one ends once its running commands do.
// Nothing else comes in from a sandbox: no line a command could write changes the settings,
// and `stale` only makes srt do again what it did.

import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { createRequire, syncBuiltinESMExports } from 'node:module';
import { pathToFileURL } from 'node:url';

// srt finds programs (rg, bash, and bwrap and socat when its settings do not name them) with
// `which`, spawned with a one-second timeout under Node (Bun looks them up in-process). On a
// loaded host the spawn alone can take longer, and srt then refuses to start: "bubblewrap
// (bwrap) not installed" (two jobs of CI's emulated guest). So `which <name>` is answered here,
// in-process, as `which` answers it: the first executable file of that name on PATH, or the
// path itself when the name has a slash. Every other spawn is srt's own. Installed before srt
// is imported: its named import of spawnSync is a live binding that this update reaches.
const childProcess = createRequire(import.meta.url)('node:child_process');
const spawnSyncOfNode = childProcess.spawnSync;
childProcess.spawnSync = function spawnSync(file, args, options) {
  if (file === 'which' && Array.isArray(args) && args.length === 1 && !args[0].startsWith('-')) {
    const found = which(args[0]);
    const stdout = found === null ? '' : `${found}\n`;
    return { pid: 0, output: [null, stdout, ''], stdout, stderr: '', status: found === null ? 1 : 0, signal: null };
  }
  return spawnSyncOfNode.apply(this, arguments);
};
syncBuiltinESMExports();

function which(name) {
  const executable = file => {
    try {
      fs.accessSync(file, fs.constants.X_OK);
      return fs.statSync(file).isFile();
    } catch {
      return false;
    }
  };
  if (name.includes('/')) return executable(name) ? name : null;
  for (const dir of (process.env.PATH ?? '').split(':')) {
    const file = path.join(dir || '.', name);
    if (executable(file)) return file;
  }
  return null;
}

const [pkg, settingsPath, executorPath, listenArg, lifelineArg] = process.argv.slice(2);
const listenFd = Number(listenArg);
const lifelineFd = Number(lifelineArg);

const say = line => process.stdout.write(`${line}\n`);
let stopping = false;

let manager;
// Every sandbox still running, and the one that takes new commands.
const sandboxes = new Set();
let rebuilding = false;
let readySaid = false;

async function stopSandboxes() {
  await Promise.all(
    [...sandboxes].map(child => {
      const exited = new Promise(resolve => child.once('exit', resolve));
      try {
        // bubblewrap dies with its parent (--die-with-parent), the commands' namespaces with it.
        process.kill(-child.pid, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
      return exited;
    }),
  );
}

async function stop(code) {
  if (stopping) return;
  stopping = true;
  await stopSandboxes();
  try {
    // Stops the bridges and removes the mount points bubblewrap left in the checkout.
    await manager?.reset();
  } catch (e) {
    process.stderr.write(`quest-runner sandbox host: srt's cleanup: ${e}\n`);
  }
  process.exit(code);
}

function fail(message) {
  say(`failed ${String(message).replace(/\s+/g, ' ')}`);
  return stop(1);
}

// srt's wrap, now: the scan and the mounts as the checkout is; then the sandbox.
async function startSandbox(text) {
  const wrapped = await manager.wrapWithSandbox(text);
  if (stopping) return;
  // `exec`: bubblewrap's parent is then this process, so the sandbox dies with it however it
  // dies (--die-with-parent); srt's wrap is a simple command, made to take such a prefix.
  const child = spawn(`exec ${wrapped}`, {
    shell: true,
    detached: true,
    stdio: ['ignore', 'pipe', 'inherit', listenFd],
  });
  sandboxes.add(child);
  let buffered = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', chunk => {
    buffered += chunk;
    let nl;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      if (line === 'ready' && !readySaid) {
        readySaid = true;
        say('ready');
      } else if (line === 'stale' && !child.retired) {
        // It takes no more commands, and exits once its running ones end.
        child.retired = true;
        if (rebuilding) continue;
        rebuilding = true;
        process.stderr.write('quest-runner sandbox host: the sandbox is out of date; srt wraps again\n');
        startSandbox(text)
          .then(() => { rebuilding = false; })
          .catch(e => fail(`remaking the sandbox: ${e instanceof Error ? e.message : e}`));
      }
    }
    if (buffered.length > 4096) buffered = '';
  });
  child.on('error', e => fail(`starting the sandbox: ${e.message}`));
  child.on('exit', (code, signal) => {
    sandboxes.delete(child);
    if (stopping) return;
    if (child.retired) {
      // A replaced sandbox whose last command ended: srt's bookkeeping of its mount points.
      manager.cleanupAfterCommand();
    } else {
      fail(`the sandbox stopped (${signal ?? `exit status ${code}`}); its log has the reason`);
    }
  });
}

try {
  const lib = await import(pathToFileURL(path.join(pkg, 'dist/index.js')).href);
  const { loadConfig } = await import(pathToFileURL(path.join(pkg, 'dist/utils/config-loader.js')).href);
  const { getApplySeccompBinaryPath } = await import(
    pathToFileURL(path.join(pkg, 'dist/sandbox/generate-seccomp-filter.js')).href
  );
  manager = lib.SandboxManager;

  // The lifeline: the runner gone, however it went, or done with the job. Read as a socket
  // (a libuv stream), not an fs stream, whose blocking read would hold up process.exit().
  const lifeline = new net.Socket({ fd: lifelineFd, readable: true, writable: false });
  lifeline.on('data', () => {});
  lifeline.on('end', () => stop(0));
  lifeline.on('error', () => stop(0));
  process.on('SIGTERM', () => stop(0));
  process.on('SIGINT', () => stop(0));

  // The settings, validated as srt's own command line validates them: a file that does not
  // load is an error, never srt's defaults.
  const loaded = loadConfig(settingsPath);
  if (loaded.kind !== 'ok') {
    throw new Error(loaded.reason ?? `${settingsPath}: ${loaded.kind}`);
  }
  const executor = JSON.parse(fs.readFileSync(executorPath, 'utf8'));
  // srt's own seccomp helper, found as its wrap finds it: the executor runs it per command.
  const helper = getApplySeccompBinaryPath(undefined);
  if (!helper) {
    throw new Error("srt's seccomp helper (vendor/seccomp/<arch>/apply-seccomp) was not found");
  }
  executor.apply_seccomp = helper;

  // srt reads the working directory for its mandatory denies: the checkout's top.
  process.chdir(executor.checkout);
  await manager.initialize(loaded.config);
  await startSandbox(JSON.stringify(executor));
} catch (e) {
  await fail(e instanceof Error ? e.message : e);
}
