# t/021_idempotency_stress.pl: idempotency keys under heavy concurrent use.
#
# Phase 1, same payloads: 8 clients each make 10,000 orch_enqueue calls over
# the same 1,000 keys (10 passes; every key 80 times in all, by every
# client), always with the key's one payload.  Expected: exactly 1,000
# tasks, one per key, created by exactly one call; every call succeeded and
# returned its key's task; no unique violation (23505) or any other error
# reached a caller.
#
# Phase 2, mixed payloads: the same over 1,000 new keys, but each call sends
# one of two payload variants of its key (a deterministic rule of client and
# pass).  Expected: exactly one task per key (with one of the variants);
# every call with the stored variant returned that task, every other call
# got OR004 and nothing else; no caller saw any other error.
#
# Each client is one psql session running CALL stress_client(...): a
# procedure that makes its calls one transaction each (COMMIT after every
# call, as independent clients would) and records each call's outcome (the
# id, or the SQLSTATE it raised) in stress_log.  The psql client's stderr is
# captured too: nothing may reach it.  The clients start together and walk
# the keys in the same order, and a call that created its task keeps its
# transaction open 2 ms longer, so that the others pile up on its key and
# then race for the next one; the test checks that most keys were really
# raced for (the key did not exist when two or more calls on it started).
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run ();
use Time::HiRes qw(time);

my $CLIENTS = 8;
my $CALLS   = 10_000;
my $KEYS    = 1_000;
my $TIMEOUT = 180;

my $t0   = time;
my $node = PostgreSQL::Test::Cluster->new('idem_stress');
$node->init;
$node->append_conf('postgresql.conf', "max_connections = 40\n");
$node->start;

sub query { return $node->safe_psql('postgres', $_[0]); }

query('CREATE EXTENSION orchestrator');
query(q{
CREATE TABLE start_gate (phase int, client int);
CREATE UNLOGGED TABLE stress_log (phase int, client int, call int, k int, variant int,
                                  fresh boolean, created boolean, id bigint,
                                  sqlstate text, message text);

-- One call: the task id, or the SQLSTATE (and message) it raised.  fresh:
-- the key did not exist (committed) when the call started, so the call
-- raced to create it; created: this call's transaction created the task
-- (the task row's inserting transaction is still in progress: ours; a fresh
-- test cluster has xid epoch 0, so xmin converts to xid8 as is).  Returns
-- created.
CREATE FUNCTION stress_call(p_phase int, p_client int, p_call int, p_k int, p_variant int)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE tid bigint; v_key text := format('p%s-key-%s', p_phase, p_k); f boolean; cr boolean;
BEGIN
    f := NOT EXISTS (SELECT 1 FROM orch.idempotency_keys i WHERE i.tenant_id = 'default' AND i.key = v_key);
    BEGIN
        tid := orch_enqueue('stress_' || p_phase, jsonb_build_object('k', p_k, 'v', p_variant),
                            idempotency_key => v_key);
        SELECT pg_xact_status(t.xmin::text::xid8) = 'in progress' INTO cr FROM orch.tasks t WHERE t.id = tid;
        INSERT INTO stress_log VALUES (p_phase, p_client, p_call, p_k, p_variant, f, cr, tid, NULL, NULL);
    EXCEPTION WHEN OTHERS THEN
        INSERT INTO stress_log VALUES (p_phase, p_client, p_call, p_k, p_variant, f, false, NULL, SQLSTATE, SQLERRM);
    END;
    RETURN coalesce(cr, false);
END $$;

-- A client: 10 passes over the 1,000 keys, one transaction per call.  All
-- clients start together and walk the keys in the same order; a call that
-- created its task keeps its transaction open for 2 ms more (as an
-- application's transaction might), so that the other clients catch up with
-- it, wait for its key and then race for the next one.  Phase 1 always sends
-- variant 1; phase 2 sends variant 1 + (client + pass) mod 2, so every client
-- sends both variants of every key and, at any moment, half of the clients
-- send the one and half the other.
CREATE PROCEDURE stress_client(p_phase int, p_client int, p_clients int, p_calls int, p_keys int)
LANGUAGE plpgsql AS $$
DECLARE k int; v int;
BEGIN
    INSERT INTO start_gate VALUES (p_phase, p_client);
    COMMIT;
    WHILE (SELECT count(*) FROM start_gate WHERE phase = p_phase) < p_clients LOOP
        PERFORM pg_sleep(0.001);
        COMMIT;
    END LOOP;
    FOR c IN 0 .. p_calls - 1 LOOP
        k := (c * 7) % p_keys;
        v := CASE WHEN p_phase = 1 THEN 1 ELSE 1 + (p_client + c / p_keys) % 2 END;
        IF stress_call(p_phase, p_client, c, k, v) THEN
            PERFORM pg_sleep(0.002);
        END IF;
        COMMIT;
    END LOOP;
END $$;
});

# Run all clients of a phase at once; returns their stderr texts.
sub run_phase
{
	my ($phase) = @_;
	my $connstr = $node->connstr('postgres');
	my (@h, %err);
	for my $c (1 .. $CLIENTS)
	{
		$err{$c} = '';
		push @h,
		  [
			$c,
			IPC::Run::start(
				[
					'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=0',
					'-d', $connstr . " application_name=stress_$c",
					'-c', "CALL stress_client($phase, $c, $CLIENTS, $CALLS, $KEYS)"
				],
				'<', \undef, '>', \my $out, '2>', \$err{$c},
				IPC::Run::timeout($TIMEOUT))
		  ];
	}
	my $ok = 1;
	for my $p (@h)
	{
		my ($c, $h) = @$p;
		eval { $h->finish; 1 } or do { $ok = 0; diag("client $c: $@"); eval { $h->kill_kill } };
	}
	ok($ok, "phase $phase: all $CLIENTS clients finished within the time limit");
	return \%err;
}

sub outcomes
{
	my ($phase) = @_;
	return query(
		"SELECT string_agg(o || '=' || n, ' ' ORDER BY o) FROM (
		    SELECT coalesce(sqlstate, 'ok') AS o, count(*) AS n FROM stress_log
		     WHERE phase = $phase GROUP BY 1) s");
}

# ---------------------------------------------------------------------------
# Phase 1: same payload per key.
# ---------------------------------------------------------------------------
my $p1 = time;
my $err = run_phase(1);
diag(sprintf('phase 1: %d calls in %.1f s', $CLIENTS * $CALLS, time - $p1));
is(join('', map { $err->{$_} } sort keys %$err), '', 'phase 1: nothing reached any client\'s stderr');

is(query(q{SELECT count(*) FROM stress_log WHERE phase = 1}),
	$CLIENTS * $CALLS, 'phase 1: every call was made and recorded');
is(outcomes(1), 'ok=' . ($CLIENTS * $CALLS), 'phase 1: every call succeeded (no 23505, no error at all)');
is( query(q{SELECT count(*) || ' ' || count(DISTINCT idempotency_key)
              FROM orch.tasks WHERE queue = 'stress_1'}),
	"$KEYS $KEYS", 'phase 1: exactly 1,000 tasks, one per key');
is( query(q{SELECT count(*) FROM (SELECT k FROM stress_log WHERE phase = 1
                                    GROUP BY k HAVING count(DISTINCT id) <> 1) s}),
	'0', 'phase 1: all 80 calls of a key returned one id');
is( query(q{SELECT count(*) FROM stress_log l
              LEFT JOIN orch.tasks t ON t.id = l.id AND t.idempotency_key = format('p1-key-%s', l.k)
                                    AND t.payload = jsonb_build_object('k', l.k, 'v', 1)
             WHERE l.phase = 1 AND t.id IS NULL}),
	'0', 'phase 1: every returned id is the task holding that key, with that payload');
is( query(q{SELECT count(*) || ' ' || count(DISTINCT k.task_id) FROM orch.idempotency_keys k
              JOIN orch.tasks t ON t.id = k.task_id WHERE t.queue = 'stress_1'}),
	"$KEYS $KEYS", 'phase 1: 1,000 idempotency keys, each naming its own task');
is( query(q{SELECT count(*) FROM orch.history e JOIN orch.tasks t ON t.id = e.task_id
             WHERE t.queue = 'stress_1'}),
	$KEYS, 'phase 1: one event per task (replays write none)');
is( query(q{SELECT count(*) FROM (SELECT k FROM stress_log WHERE phase = 1
                                    GROUP BY k HAVING count(*) = 80 AND count(DISTINCT client) = 8) s}),
	$KEYS, 'phase 1: every key was used 80 times, by all 8 clients');
is( query(q{SELECT count(*) FILTER (WHERE n = 1) FROM (
                SELECT count(*) FILTER (WHERE created) AS n FROM stress_log WHERE phase = 1 GROUP BY k) s}),
	$KEYS, 'phase 1: for every key exactly one call created the task');
my $raced1 = query(q{SELECT count(*) FROM (SELECT k FROM stress_log WHERE phase = 1 AND fresh
                                             GROUP BY k HAVING count(DISTINCT client) > 1) s});
diag("phase 1: $raced1 keys were raced for by two or more clients");
cmp_ok($raced1, '>=', $KEYS / 10, 'phase 1: clients really raced to create keys (at least 100 keys)');

# ---------------------------------------------------------------------------
# Phase 2: two payload variants per key.
# ---------------------------------------------------------------------------
my $p2 = time;
$err = run_phase(2);
diag(sprintf('phase 2: %d calls in %.1f s', $CLIENTS * $CALLS, time - $p2));
is(join('', map { $err->{$_} } sort keys %$err), '', 'phase 2: nothing reached any client\'s stderr');

is(query(q{SELECT count(*) FROM stress_log WHERE phase = 2}),
	$CLIENTS * $CALLS, 'phase 2: every call was made and recorded');
is( query(q{SELECT count(*) FROM (SELECT k FROM stress_log WHERE phase = 2
                                    GROUP BY k HAVING count(DISTINCT variant) = 2) s}),
	$KEYS, 'phase 2: every key was sent with both payload variants');
is( query(q{SELECT count(*) || ' ' || count(DISTINCT idempotency_key)
              FROM orch.tasks WHERE queue = 'stress_2'}),
	"$KEYS $KEYS", 'phase 2: exactly 1,000 tasks, one per key');
# Per call: the stored variant must have succeeded with the task's id, the
# other must have raised OR004; anything else is a failure.
my $expected = query(q{
    SELECT count(*) FILTER (WHERE l.variant = (t.payload ->> 'v')::int) || ' '
        || count(*) FILTER (WHERE l.variant <> (t.payload ->> 'v')::int)
      FROM stress_log l JOIN orch.tasks t ON t.idempotency_key = format('p2-key-%s', l.k)
     WHERE l.phase = 2 AND t.queue = 'stress_2'});
my ($n_same, $n_other) = split / /, $expected;
cmp_ok($n_other, '>', 0, "phase 2: $n_other calls sent the losing variant");
is(outcomes(2), "OR004=$n_other ok=$n_same",
	'phase 2: the outcomes are exactly OR004 for the losing variant and success otherwise');
is( query(q{
    SELECT count(*) FROM stress_log l JOIN orch.tasks t ON t.idempotency_key = format('p2-key-%s', l.k)
     WHERE l.phase = 2 AND t.queue = 'stress_2'
       AND NOT CASE WHEN l.variant = (t.payload ->> 'v')::int THEN l.id = t.id AND l.sqlstate IS NULL
                    ELSE l.id IS NULL AND l.sqlstate = 'OR004' END}),
	'0', 'phase 2: each call got the task (stored variant) or OR004 (other variant), call by call');
is( query(q{SELECT count(*) FROM orch.history e JOIN orch.tasks t ON t.id = e.task_id
             WHERE t.queue = 'stress_2'}),
	$KEYS, 'phase 2: one event per task (conflicts create nothing)');
is( query(q{SELECT count(*) FROM orch.idempotency_keys WHERE key LIKE 'p2-key-%'}),
	$KEYS, 'phase 2: 1,000 idempotency keys');
is( query(q{SELECT count(*) FILTER (WHERE n = 1) FROM (
                SELECT count(*) FILTER (WHERE created) AS n FROM stress_log WHERE phase = 2 GROUP BY k) s}),
	$KEYS, 'phase 2: for every key exactly one call created the task');
my $raced2 = query(q{SELECT count(*) FROM (SELECT k FROM stress_log WHERE phase = 2 AND fresh
                                             GROUP BY k HAVING count(DISTINCT variant) > 1) s});
diag("phase 2: $raced2 keys were raced for with both variants");
cmp_ok($raced2, '>=', $KEYS / 10, 'phase 2: both variants really raced to create keys (at least 100 keys)');

is(query(q{SELECT count(*) FROM stress_log WHERE sqlstate IN ('23505', 'XX000', '40001', '40P01')}),
	'0', 'no unique violation, internal error, serialization failure or deadlock in either phase');

$node->stop;
diag(sprintf('021_idempotency_stress: %.1f s', time - $t0));
done_testing();
