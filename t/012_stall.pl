# t/012_stall.pl: a stalled worker is fenced off by its lease token.
#
# Worker A claims a task with a 1-second lease, heartbeats once, then stalls
# (no more heartbeats) past the end of its lease.  Its orch_complete,
# orch_heartbeat and orch_fail raise OR003 and change nothing, both before
# anyone else claimed the task (the lease merely ran out) and after worker B
# claimed it: B's orch_dequeue recovers the expired lease (a failed attempt,
# class TRANSIENT, reason lease_expired; the queue's initial_delay is 0, so
# the retry is due at once) and hands B the task with a new token, attempt 2.
# B heartbeats and completes.  A's calls then raise OR002 (terminal wins over
# a stale lease).  The history shows attempt 1 lease_expired (worker-a, A's
# token) and attempt 2 completed (worker-b, B's token), and one chain of
# events.  A second task, claimed by A at the same time in another queue
# (retry delay 1 hour), is recovered by orch_maintain() instead and waits to
# be retried: A's calls on it raise OR003 as well.  "Changes nothing" is
# checked on the whole task row (updated_at included) and on the number of
# attempt and event rows.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);
use FaultHarness qw(query sqlstate_of wait_for);

my $node = PostgreSQL::Test::Cluster->new('stall');
$node->init;
$node->start;

sub sql { return query($node, 'postgres', $_[0]); }

sql(q{CREATE EXTENSION orchestrator});
sql(q{SELECT orch_create_queue('stall', '{"initial_delay": 0}')});
sql(q{SELECT orch_create_queue('stall_wait', '{"initial_delay": "1 hour"}')});
my $id = sql(q{SELECT orch_enqueue('stall', '{"job": "stall"}')});
like($id, qr/^\d+$/, 'enqueued a task');
my $id2 = sql(q{SELECT orch_enqueue('stall_wait', '{"job": "waits"}')});

# The whole task row and the size of its history.
sub snapshot
{
	my $task = shift // $id;
	return sql(qq{SELECT row_to_json(t)::text FROM orch.tasks t WHERE id = $task})
	  . ' attempts=' . sql(qq{SELECT count(*) FROM orch.attempt_history WHERE task_id = $task})
	  . ' events=' . sql(qq{SELECT count(*) FROM orch.history WHERE task_id = $task});
}

# Worker A claims with a 1-second lease.
my ($a_task, $tok_a, $a_attempt, $a_expires) = split /\|/,
  sql(q{SELECT task_id, lease_token, attempt, lease_expires_at
        FROM orch_dequeue('stall', 'worker-a', 1, '1 second')});
is($a_task,    $id, 'worker A claimed the task');
is($a_attempt, 1,   'attempt 1');
my ($a_task2, $tok_a2) = split /\|/,
  sql(q{SELECT task_id, lease_token FROM orch_dequeue('stall_wait', 'worker-a', 1, '1 second')});
is($a_task2, $id2, 'worker A also claimed a task of queue stall_wait');
is(sql(qq{SELECT orch_heartbeat($id, '$tok_a', '1 second')}),
	'executing', 'A heartbeats once while its lease is live');
($a_expires) = sql(qq{SELECT lease_expires_at FROM orch.tasks WHERE id = $id});

# A stalls: no heartbeat until well past the end of its lease.
ok( wait_for(30,
		sub { sql(qq{SELECT clock_timestamp() > '$a_expires'::timestamptz + interval '200 ms'}) eq 't' }),
	"A's lease ran out");

# Before anyone else claims the task: A is fenced off already.
my $before = snapshot();
like($before, qr/"state":"executing"/, 'the task is still executing under the expired lease');
is(sqlstate_of($node, 'postgres', qq{SELECT orch_complete($id, '$tok_a', '{"by": "a"}')}),
	'OR003', "A's orch_complete on its expired lease raises OR003");
is(sqlstate_of($node, 'postgres', qq{SELECT orch_heartbeat($id, '$tok_a', '1 minute')}),
	'OR003', "A's orch_heartbeat on its expired lease raises OR003");
is(sqlstate_of($node, 'postgres', qq{SELECT * FROM orch_fail($id, '$tok_a', 'TRANSIENT', 'a failed')}),
	'OR003', "A's orch_fail on its expired lease raises OR003");
is(snapshot(), $before, '... and none of them changed the task or its history');

# Worker B claims: lazy recovery at dequeue, then a new claim of the task.
my ($b_task, $tok_b, $b_attempt) = split /\|/,
  sql(q{SELECT task_id, lease_token, attempt FROM orch_dequeue('stall', 'worker-b', 1, '30 seconds')});
is($b_task,    $id, 'worker B claimed the same task (recovered at dequeue, no retry delay)');
is($b_attempt, 2,   'as attempt 2');
isnt($tok_b, $tok_a, 'with a new lease token');
is( sql(qq{SELECT attempt || ' ' || outcome || ' ' || error_class || ' ' || worker || ' ' || (lease_token = '$tok_a')
           FROM orch.attempts WHERE task_id = $id ORDER BY attempt}),
	'1 lease_expired TRANSIENT worker-a true',
	"A's attempt is recorded as lease_expired (TRANSIENT) with A's token");

# Stale worker A, now that B owns the task.
$before = snapshot();
like($before, qr/"lease_owner":"worker-b"/, 'B holds the lease');
is(sqlstate_of($node, 'postgres', qq{SELECT orch_complete($id, '$tok_a', '{"by": "a"}')}),
	'OR003', "stale A's orch_complete raises OR003");
is(sqlstate_of($node, 'postgres', qq{SELECT orch_heartbeat($id, '$tok_a', '1 minute')}),
	'OR003', "stale A's orch_heartbeat raises OR003");
is(sqlstate_of($node, 'postgres', qq{SELECT * FROM orch_fail($id, '$tok_a', 'TRANSIENT', 'a failed')}),
	'OR003', "stale A's orch_fail raises OR003");
is(sqlstate_of($node, 'postgres', qq{SELECT * FROM orch_fail($id, '$tok_a', 'NON_RETRYABLE', 'a gives up')}),
	'OR003', "stale A's orch_fail NON_RETRYABLE raises OR003");
is(snapshot(), $before, '... and none of them changed the task or its history');

# The second task: recovered by a maintenance pass, waiting for its retry.
is(sql(q{SELECT count FROM orch_maintain() WHERE action = 'leases_recovered'}),
	'1', 'orch_maintain recovers the expired lease of the second task');
is(sql(qq{SELECT state || ' ' || reason_code || ' ' || (retry_at > now()) FROM orch.tasks WHERE id = $id2}),
	'awaiting_tool lease_expired true', 'which now waits for its retry');
$before = snapshot($id2);
is(sqlstate_of($node, 'postgres', qq{SELECT orch_complete($id2, '$tok_a2')}),
	'OR003', "A's orch_complete on the recovered task raises OR003");
is(sqlstate_of($node, 'postgres', qq{SELECT orch_heartbeat($id2, '$tok_a2')}),
	'OR003', "A's orch_heartbeat on the recovered task raises OR003");
is(sqlstate_of($node, 'postgres', qq{SELECT * FROM orch_fail($id2, '$tok_a2', 'TRANSIENT', 'late')}),
	'OR003', "A's orch_fail on the recovered task raises OR003");
is(snapshot($id2), $before, '... and none of them changed it');

# The new owner of the first task.
is(sql(qq{SELECT orch_heartbeat($id, '$tok_b', '30 seconds')}), 'executing', 'B heartbeats');
is(sql(qq{SELECT orch_complete($id, '$tok_b', '{"by": "b"}')}), 'completed', 'B completes the task');

# A after the completion: terminal wins over the stale lease.
$before = snapshot();
is(sqlstate_of($node, 'postgres', qq{SELECT orch_complete($id, '$tok_a', '{"by": "a"}')}),
	'OR002', "A's orch_complete after B completed raises OR002");
is(sqlstate_of($node, 'postgres', qq{SELECT orch_heartbeat($id, '$tok_a')}),
	'OR002', "A's orch_heartbeat after B completed raises OR002");
is(sqlstate_of($node, 'postgres', qq{SELECT * FROM orch_fail($id, '$tok_a', 'TRANSIENT', 'late')}),
	'OR002', "A's orch_fail after B completed raises OR002");
is(snapshot(), $before, '... and change nothing');

# Final state and history.
is( sql(qq{SELECT state || ' ' || attempts || ' ' || failures || ' ' || result::text
           FROM orch_status($id)}),
	'completed 2 1 {"by": "b"}', "the task is completed with B's result, 2 attempts, 1 failure");
is( sql(qq{SELECT string_agg(attempt || ':' || outcome || ':' || label || ':'
                   || CASE lease_token WHEN '$tok_a' THEN 'A' WHEN '$tok_b' THEN 'B' ELSE '?' END, ' ')
           FROM orch_history($id) WHERE kind = 'attempt'}),
	'1:lease_expired:worker-a:A 2:completed:worker-b:B',
	'history: attempt 1 lease_expired (A), attempt 2 completed (B)');
is( sql(qq{SELECT string_agg(from_state || '>' || to_state || ':' || reason_code, ' ' ORDER BY event_id)
           FROM orch_events WHERE task_id = $id}),
	'received>queued:enqueued queued>executing:claimed executing>awaiting_tool:lease_expired '
	  . 'awaiting_tool>executing:claimed executing>completed:completed',
	'events: one chain, the lease expiry in the middle, one completion');

$node->stop;
done_testing();
