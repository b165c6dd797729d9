//! The permitted steps of a run: what commands must be able to do inside the same sandbox
//! (write the checkout and `$TMPDIR`, reach a registry through the proxy, read packages), so
//! that no refusal of an attempt can pass vacuously, and the closing steps after them.

use super::Targets;
use crate::model_server::Step;

/// The shell command that commands run first: writes the checkout and `$TMPDIR`, sees the
/// devShell (an untrusted revision's too: built inside the job's boundary). If it fails,
/// every refusal below would be vacuous.
pub fn permitted(_t: &Targets) -> Step {
    let devshell = "echo \"devshell=$BOUNDARY_VAR\"; cat \"$HOME/shellhook-ran\"";
    Step::bash(format!(
        "echo ok > permitted.txt && echo ok > \"$TMPDIR/permitted\" && cat permitted.txt \"$TMPDIR/permitted\" && {devshell} && echo PERMITTED-RAN"
    ))
}

/// For trusted revisions: a request to a package registry goes through the sandbox's proxy,
/// which forwards it (offline it then fails upstream: any status but 403, or none). If the
/// proxy path were broken, every network refusal would be vacuous.
pub fn permitted_network() -> Step {
    // Over HTTPS too: the runner's proxy terminates TLS with the job's CA, which commands
    // trust through the policy's variables (offline, upstream then fails: a 5xx, not 000).
    Step::bash(
        "curl -sS -m 10 -o /dev/null -w 'status=%{http_code}' -x \"${HTTPS_PROXY:-$HTTP_PROXY}\" http://registry.npmjs.org/ ; curl -sS -m 10 -o /dev/null -w ' https-status=%{http_code}' https://registry.npmjs.org/ ; echo NET-RAN",
    )
}

/// The npm config the registry commands use: the stand-in as the registry, with a token
/// (what a publish needs), written into the command's own temp dir.
pub(super) fn npmrc(port: u16) -> String {
    format!(
        "printf 'registry=http://127.0.0.1:{port}/\\n//127.0.0.1:{port}/:_authToken=qr-token\\naudit=false\\nfund=false\\nupdate-notifier=false\\n' > \"$TMPDIR/qr-npmrc\" && export NPM_CONFIG_USERCONFIG=\"$TMPDIR/qr-npmrc\" NO_PROXY= no_proxy="
    )
}

/// For trusted revisions: reads from a registry go through the runner's decider: `npm view`,
/// `npm install` (packument and tarball) and a plain `GET` of the stand-in registry. If they
/// failed, the refusals of the writes below would be vacuous.
pub fn permitted_registry_reads(port: u16, token: &str) -> Step {
    let pkg = crate::npm_registry::PACKAGE;
    Step::bash(format!(
        "{npmrc} && cd \"$TMPDIR\" && echo \"VIEW=$(npm view {pkg} version)\" && mkdir -p qr-install && cd qr-install && npm install --no-save {pkg} >/dev/null 2>&1 && grep -q '\"name\":\"{pkg}\"' node_modules/{pkg}/package.json && echo INSTALL-OK ; curl -sS -m 10 -o /dev/null -w 'get-status=%{{http_code}}' http://127.0.0.1:{port}/qr-get-{token} ; echo READS-RAN",
        npmrc = npmrc(port),
    ))
}

/// For trusted runs where the suite planted the host's package-manager configuration (a
/// global npmrc with `cafile`, `strict-ssl` and a company proxy, a pip.conf with `cert` and
/// `proxy`; [`super::host_config`]): every package manager the host has reads `qr-pkg` from the
/// stand-in registry over HTTPS, through the runner's proxy and decider. First it shows that
/// the sandbox reads the planted files, and that without the runner's variable npm and pip
/// fail on them (certificate), so the reads that follow are not vacuous.
///
/// Prints `PLANTED-*`, `WITHOUT <client>: <error>`, and one `READ <client> ok|FAILED|skipped`
/// line per client; `PM-READS-RAN` at the end.
///
/// npm gets a cache of its own here (pip none, uv and deno their own dirs): the job's HOME
/// already holds `qr-pkg`'s tarball from [`permitted_registry_reads`], and npm takes a tarball
/// whose integrity it has cached without asking the registry, so `npm install` would fetch only
/// the packument over HTTPS and no tarball would pass the decider.
pub fn permitted_package_manager_reads(
    tls_port: u16,
    npmrc: &std::path::Path,
    token: &str,
) -> Step {
    let pkg = crate::npm_registry::PACKAGE;
    let ver = crate::npm_registry::VERSION;
    let npmrc = quest_runner::util::shell::quote(&npmrc.to_string_lossy());
    let mark = format!("boundary suite {token}");
    Step::bash(format!(
        r#"export NO_PROXY= no_proxy= npm_config_update_notifier=false npm_config_audit=false npm_config_fund=false
R=https://localhost:{tls_port}
cd "$TMPDIR" && mkdir -p qr-pm && cd qr-pm || exit 1
rd() {{ c=$1; shift; out=$(timeout 60 "$@" 2>&1); rc=$?; if [ $rc = 0 ]; then echo "READ $c ok $(printf '%s\n' "$out" | tail -n 1 | cut -c1-100)"; else echo "READ $c FAILED exit $rc: $(printf '%s\n' "$out" | grep -v '^[[:space:]]*at ' | tail -n 4 | tr '\n' ' ' | cut -c1-600)"; fi; }}
pkgjson() {{ mkdir -p "$1" && echo '{{"name":"qr","version":"0.0.0"}}' > "$1/package.json"; }}
grep -q '{mark}' {npmrc} && echo PLANTED-NPMRC
grep -q '{mark}' /etc/pip.conf && echo PLANTED-PIPCONF
echo "WITHOUT npm: $(env -u npm_config_cafile timeout 60 npm view --registry "$R/" --fetch-retries=0 {pkg} version 2>&1 | grep -m1 -o 'code [A-Z_]*')"
echo "WITHOUT pip: $(env -u PIP_CERT -u REQUESTS_CA_BUNDLE -u CURL_CA_BUNDLE timeout 60 python3 -m pip download --retries 0 --no-deps --no-cache-dir --disable-pip-version-check -d pip-without --index-url "$R/simple" {pkg}=={ver} 2>&1 | grep -m1 -o -i 'certificate verify failed')"
rd npm npm view --cache "$PWD/npm-cache" --registry "$R/" {pkg}@{ver} version
pkgjson npm && (cd npm && rd npm-install npm install --cache "$PWD/../npm-cache" --registry "$R/" --ignore-scripts --no-package-lock {pkg}@{ver})
rd pip python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check -d pip --index-url "$R/simple" {pkg}=={ver}
if command -v uv >/dev/null; then rd uv env UV_CACHE_DIR="$PWD/uv-cache" uv pip install --no-deps --python python3 --target uv --index-url "$R/simple" {pkg}=={ver}; else echo 'READ uv skipped: not installed'; fi
if command -v yarn >/dev/null && yarn --version 2>/dev/null | grep -q '^1\.'; then pkgjson yarn && (cd yarn && rd yarn yarn add --registry "$R/" --ignore-scripts --no-lockfile --non-interactive {pkg}@{ver}); else echo 'READ yarn skipped: no yarn classic'; fi
y=$(command -v yarn-berry || command -v yarn); if [ -n "$y" ] && ! "$y" --version 2>/dev/null | grep -q '^1\.'; then pkgjson berry && : > berry/yarn.lock && (cd berry && rd yarn-berry env YARN_NPM_REGISTRY_SERVER="$R" "$y" npm info {pkg}@{ver} --fields version --json); else echo 'READ yarn-berry skipped: no yarn 2+'; fi
if command -v pnpm >/dev/null; then pkgjson pnpm && (cd pnpm && rd pnpm pnpm add --registry "$R/" --ignore-scripts {pkg}@{ver}); else echo 'READ pnpm skipped: not installed'; fi
if command -v bun >/dev/null; then pkgjson bun && (cd bun && rd bun bun add --registry "$R/" --ignore-scripts {pkg}@{ver}); else echo 'READ bun skipped: not installed'; fi
if command -v deno >/dev/null; then rd deno env NPM_CONFIG_REGISTRY="$R/" DENO_DIR="$PWD/deno" deno cache --quiet npm:{pkg}@{ver}; else echo 'READ deno skipped: not installed'; fi
rd curl curl -fsS -o /dev/null -w '%{{http_code}}' "$R/{pkg}"
if command -v java >/dev/null; then printf 'public class Fetch {{ public static void main(String[] a) throws Exception {{ var c = (java.net.HttpURLConnection) new java.net.URL(a[0]).openConnection(); System.out.println(c.getResponseCode() + " " + c.getInputStream().readAllBytes().length + " bytes"); }} }}
' > Fetch.java && rd java java -Dhttp.nonProxyHosts= Fetch.java "$R/{pkg}"; else echo 'READ java skipped: not installed'; fi
echo PM-READS-RAN"#
    ))
}

/// Commits whatever the attempts left, then runs one more command, so any mount point the
/// sandbox leaves behind shows as uncommitted in the job's result.
pub fn closing() -> Vec<Step> {
    vec![
        Step::bash("git add -A && git commit -qm 'boundary run' ; echo CLOSING-RAN"),
        Step::bash("true; echo LAST-RAN"),
    ]
}
