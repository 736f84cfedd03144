#!/usr/bin/env bash
# ring_netns_test.sh - the ring across hosts, and a link cut between them: two members in two
# network namespaces joined by a veth pair (two simulated hosts) all-reduce in a loop
# (tests/tools/ring_probe). The link is cut (the interface set down: packets vanish, no reset
# reaches either side); both members must detect it within their data-plane timeout plus a
# margin (no hang), name the peer, and - once the link is back - form the next generation
# and go on with correct sums. The probes run with --no-shm: namespaces of one machine could
# map each other's shared memory (the ring's lane on one host), hosts cannot, and this test is
# about the link. Needs root (ip netns); namespaces are removed at the end.
source "$(dirname "$0")/lib.sh"
PROBE=${DT_TOOLS_DIR:-$(dirname "$DTRAIN")/tools}/ring_probe
[ -x "$PROBE" ] || { fail "no ring_probe at $PROBE"; finish; exit 1; }
A=dtring-a-$$ B=dtring-b-$$
TIMEOUT_MS=2000
# detection bound: the timeout, plus a margin for a loaded machine
BOUND_MS=$((TIMEOUT_MS + 3000))
cleanup() {
    [ -n "${P0:-}" ] && kill "$P0" 2>/dev/null
    [ -n "${P1:-}" ] && kill "$P1" 2>/dev/null
    ip netns del "$A" 2>/dev/null
    ip netns del "$B" 2>/dev/null
    [ -n "${KEEP:-}" ] && echo "kept $TMP" || rm -rf "$TMP"
}
trap cleanup EXIT

ip netns add "$A" && ip netns add "$B" || { fail "cannot create network namespaces (root?)"; finish; exit 1; }
ip link add "va$$" netns "$A" type veth peer name "vb$$" netns "$B" || { fail "veth"; finish; exit 1; }
ip -n "$A" addr add 10.77.0.1/24 dev "va$$" && ip -n "$B" addr add 10.77.0.2/24 dev "vb$$" &&
    ip -n "$A" link set "va$$" up && ip -n "$B" link set "vb$$" up &&
    ip -n "$A" link set lo up && ip -n "$B" link set lo up || { fail "addresses"; finish; exit 1; }
pass "two hosts: $A (10.77.0.1) and $B (10.77.0.2)"

PEERS=10.77.0.1:7301,10.77.0.2:7302
ip netns exec "$A" "$PROBE" --rank 0 --peers $PEERS --token t0k --floats 262144 \
    --timeout-ms $TIMEOUT_MS --steps 400 --reform --no-shm >"$TMP/p0" 2>&1 &
P0=$!
ip netns exec "$B" "$PROBE" --rank 1 --peers $PEERS --token t0k --floats 262144 \
    --timeout-ms $TIMEOUT_MS --steps 400 --reform --no-shm >"$TMP/p1" 2>&1 &
P1=$!
going() { grep -q "step 100 gen 1" "$TMP/p0" && grep -q "step 100 gen 1" "$TMP/p1"; }
WAIT_POLLS=600 wait_for going && pass "the ring runs across the two hosts" ||
    fail "no progress: $(tail -n 3 "$TMP/p0" "$TMP/p1")"

ip -n "$A" link set "va$$" down
pass "link cut"
detected() { grep -q "^failed" "$TMP/p0" && grep -q "^failed" "$TMP/p1"; }
WAIT_POLLS=$((BOUND_MS / 100 + 50)) wait_for detected && pass "both members detected the cut" ||
    fail "not detected: $(tail -n 3 "$TMP/p0" "$TMP/p1")"
for f in p0 p1; do
    ms=$(grep -m1 "^failed" "$TMP/$f" | sed 's/.* after \([0-9]*\) ms.*/\1/')
    [ -n "$ms" ] && [ "$ms" -le "$BOUND_MS" ] && pass "$f: detected after $ms ms (bound $BOUND_MS)" ||
        fail "$f: $(grep -m1 "^failed" "$TMP/$f")"
    grep -m1 "^failed" "$TMP/$f" | grep -q "10.77.0" && pass "$f: the error names the peer" ||
        fail "$f: $(grep -m1 "^failed" "$TMP/$f")"
done

ip -n "$A" link set "va$$" up
wait $P0; r0=$?   # the probes give up after 120 s: no hang
wait $P1; r1=$?
P0= P1=
[ $r0 -eq 0 ] && [ $r1 -eq 0 ] && pass "after the link came back both re-formed the ring and finished" ||
    fail "exits $r0 $r1: $(tail -n 4 "$TMP/p0" "$TMP/p1")"
grep -q "formed gen 2" "$TMP/p0" && grep -q "formed gen 2" "$TMP/p1" && pass "a new generation formed" ||
    fail "no generation 2: $(grep formed "$TMP/p0" "$TMP/p1")"
finish
