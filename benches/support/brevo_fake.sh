# The stand-alone Brevo fake for benchmark scripts (benches/dlt/compare,
# scripts/bench-guard), sourced. Needs FAKE (the brevo_fake example's
# binary), KEY (the API key it accepts) and WORK (where its log goes).

# start_fake: a fresh fake (empty, no rate limit enforced, imports applied in
# the background, as Brevo's import process does) on a free port: FAKE_ADDR,
# FAKE_PID.
start_fake() {
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  FAKE_ADDR=127.0.0.1:$port
  BREVO_FAKE_LEAN=1 BREVO_FAKE_BACKGROUND_IMPORTS=1 BREVO_FAKE_API_KEY=$KEY "$FAKE" serve "$FAKE_ADDR" >>"$WORK/fake.log" 2>&1 &
  FAKE_PID=$!
  for _ in $(seq 100); do "$FAKE" count "$FAKE_ADDR" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "$(basename "$0"): the Brevo fake did not start on $FAKE_ADDR" >&2
  exit 1
}

stop_fake() {
  kill "$FAKE_PID" 2>/dev/null || true
  wait "$FAKE_PID" 2>/dev/null || true
  FAKE_PID=
}
