export NO_PROXY= no_proxy= npm_config_update_notifier=false npm_config_audit=false npm_config_fund=false
R=https://localhost:@TLS_PORT@
cd "$TMPDIR" && mkdir -p qr-pm && cd qr-pm || exit 1
rd() { c=$1; shift; out=$(timeout 60 "$@" 2>&1); rc=$?; if [ $rc = 0 ]; then echo "READ $c ok $(printf '%s\n' "$out" | tail -n 1 | cut -c1-100)"; else echo "READ $c FAILED exit $rc: $(printf '%s\n' "$out" | grep -v '^[[:space:]]*at ' | tail -n 4 | tr '\n' ' ' | cut -c1-600)"; fi; }
pkgjson() { mkdir -p "$1" && echo '{"name":"qr","version":"0.0.0"}' > "$1/package.json"; }
grep -q '@MARK@' @NPMRC@ && echo PLANTED-NPMRC
grep -q '@MARK@' /etc/pip.conf && echo PLANTED-PIPCONF
echo "WITHOUT npm: $(env -u npm_config_cafile timeout 60 npm view --registry "$R/" --fetch-retries=0 @PKG@ version 2>&1 | grep -m1 -o 'code [A-Z_]*')"
echo "WITHOUT pip: $(env -u PIP_CERT -u REQUESTS_CA_BUNDLE -u CURL_CA_BUNDLE timeout 60 python3 -m pip download --retries 0 --no-deps --no-cache-dir --disable-pip-version-check -d pip-without --index-url "$R/simple" @PKG@==@VER@ 2>&1 | grep -m1 -o -i 'certificate verify failed')"
rd npm npm view --cache "$PWD/npm-cache" --registry "$R/" @PKG@@@VER@ version
pkgjson npm && (cd npm && rd npm-install npm install --cache "$PWD/../npm-cache" --registry "$R/" --ignore-scripts --no-package-lock @PKG@@@VER@)
rd pip python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check -d pip --index-url "$R/simple" @PKG@==@VER@
if command -v uv >/dev/null; then rd uv env UV_CACHE_DIR="$PWD/uv-cache" uv pip install --no-deps --python python3 --target uv --index-url "$R/simple" @PKG@==@VER@; else echo 'READ uv skipped: not installed'; fi
if command -v yarn >/dev/null && yarn --version 2>/dev/null | grep -q '^1\.'; then pkgjson yarn && (cd yarn && rd yarn yarn add --registry "$R/" --ignore-scripts --no-lockfile --non-interactive @PKG@@@VER@); else echo 'READ yarn skipped: no yarn classic'; fi
y=$(command -v yarn-berry || command -v yarn); if [ -n "$y" ] && ! "$y" --version 2>/dev/null | grep -q '^1\.'; then pkgjson berry && : > berry/yarn.lock && (cd berry && rd yarn-berry env YARN_NPM_REGISTRY_SERVER="$R" "$y" npm info @PKG@@@VER@ --fields version --json); else echo 'READ yarn-berry skipped: no yarn 2+'; fi
if command -v pnpm >/dev/null; then pkgjson pnpm && (cd pnpm && rd pnpm pnpm add --registry "$R/" --ignore-scripts @PKG@@@VER@); else echo 'READ pnpm skipped: not installed'; fi
if command -v bun >/dev/null; then pkgjson bun && (cd bun && rd bun bun add --registry "$R/" --ignore-scripts @PKG@@@VER@); else echo 'READ bun skipped: not installed'; fi
if command -v deno >/dev/null; then rd deno env NPM_CONFIG_REGISTRY="$R/" DENO_DIR="$PWD/deno" deno cache --quiet npm:@PKG@@@VER@; else echo 'READ deno skipped: not installed'; fi
rd curl curl -fsS -o /dev/null -w '%{http_code}' "$R/@PKG@"
if command -v java >/dev/null; then printf 'public class Fetch { public static void main(String[] a) throws Exception { var c = (java.net.HttpURLConnection) new java.net.URL(a[0]).openConnection(); System.out.println(c.getResponseCode() + " " + c.getInputStream().readAllBytes().length + " bytes"); } }
' > Fetch.java && rd java java -Dhttp.nonProxyHosts= Fetch.java "$R/@PKG@"; else echo 'READ java skipped: not installed'; fi
echo PM-READS-RAN
