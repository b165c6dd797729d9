qr_run() { t0=$(date +%s%N); out=$(timeout @TIMEOUT_S@ "$@" 2>"$TMPDIR/qr.err"); rc=$?; ms=$(( ($(date +%s%N) - t0) / 1000000 )); err=$({ grep -v '^[[:space:]]*at ' "$TMPDIR/qr.err"; [ -s "$TMPDIR/qr.err" ] || printf '%s\n' "$out"; } | tail -n 4 | tr '\n' ' ' | cut -c1-400); last=$(printf '%s\n' "$out" | tail -n 1 | cut -c1-200); }
qr() { c=$1; what=$2; shift 2; qr_run "$@"; if [ $rc = 0 ]; then echo "QR $c ok $what -> $last ($ms ms)"; else echo "QR $c FAILED $what: exit $rc after $ms ms: $err"; fi; return $rc; }
qr_refused() { c=$1; what=$2; shift 2; qr_run "$@"; if [ $rc = 0 ]; then echo "QR $c NOT-REFUSED $what ($ms ms)"; else echo "QR $c refused $what: exit $rc after $ms ms: $err"; fi; }
mkdir -p "$TMPDIR/qr" && cd "$TMPDIR/qr" || exit 1
