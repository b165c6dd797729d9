if cargo --version >/dev/null 2>&1; then
  mkdir -p cargo/src && cd cargo && : > src/lib.rs && printf '[package]\nname = "qr-fetch"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n@CR@ = "=@CV@"\n' > Cargo.toml && export CARGO_HOME="$TMPDIR/qr/cargo-home" && qr cargo 'fetch @CR@ @CV@' cargo fetch --quiet && qr cargo 'fetched crate' sh -c 'stat -c "%n %s bytes" "$CARGO_HOME"/registry/cache/*/@CR@-@CV@.crate'
else
  echo "QR cargo skipped: no cargo runs in the sandbox here ($(command -v cargo || echo 'not on PATH')); crates.io read with curl"
  qr curl 'crates.io index entry of @CR@' sh -c 'curl -fsS --max-time 60 https://index.crates.io/@IX@/@CR@ | grep -cE "\"vers\": ?\"@CV@\""' && qr curl 'crate file @CR@-@CV@' sh -c 'curl -fsSL --max-time 60 -o @CR@.crate https://static.crates.io/crates/@CR@/@CR@-@CV@.crate && stat -c "%n %s bytes" @CR@.crate'
fi
