# t/001_restart.pl: orchestrator state survives a crash (immediate stop).
#
# 200 tasks are enqueued, 50 claimed and completed, one more claimed with a
# 1-second lease; the server is stopped with 'immediate' (no shutdown
# checkpoint: recovery replays the WAL) and started again.  Every task is
# still there, the completed ones are still completed with exactly one
# 'completed' event each, the queued ones are claimable, and the task whose
# lease expired while the server was down is recovered by the next dequeue
# (a TRANSIENT failed attempt, reason lease_expired) and is claimable again
# once its retry delay has passed.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('restart');
$node->init;
$node->start;

sub query { return $node->safe_psql('postgres', $_[0]); }

query('CREATE EXTENSION orchestrator');
query(q{SELECT orch_create_queue('restart',
          '{"initial_delay": "1 second", "max_delay": "1 second", "max_attempts": 5}')});

is( query(q{SELECT count(orch_enqueue('restart', jsonb_build_object('n', g)))
              FROM generate_series(1, 200) g}),
    '200', 'enqueued 200 tasks');
is(query(q{SELECT count(*) FROM orch_tasks WHERE queue = 'restart' AND state = 'queued'}),
    '200', 'all 200 are queued');

# Claim 50 (committed), then complete them in separate transactions, as a
# worker would.
my $claimed = query(q{
    CREATE TABLE claimed AS
        SELECT task_id, lease_token FROM orch_dequeue('restart', 'w1', 50);
    SELECT count(*) FROM claimed;});
is($claimed, '50', 'claimed 50 tasks');
is( query(q{SELECT count(*) FROM orch_tasks t JOIN claimed c USING (task_id)
             WHERE t.state = 'executing' AND t.lease_owner = 'w1'}),
    '50', 'the 50 claimed tasks are executing, leased by w1');
is( query(q{SELECT count(*) FILTER (WHERE orch_complete(task_id, lease_token, '{"ok": true}') = 'completed')
              FROM claimed}),
    '50', 'completed the 50 claimed tasks');

my $completed_ids = query(q{SELECT string_agg(task_id::text, ',' ORDER BY task_id)
                              FROM orch_tasks WHERE queue = 'restart' AND state = 'completed'});
my $first_50 = query(q{SELECT string_agg(task_id::text, ',' ORDER BY task_id)
                         FROM (SELECT task_id FROM orch_tasks WHERE queue = 'restart'
                               ORDER BY created_at, task_id LIMIT 50) s});
is($completed_ids, $first_50, 'the completed tasks are the first 50 enqueued (FIFO)');

# One more claim with a short lease; it expires while the server is down.
my $leased = query(q{SELECT task_id FROM orch_dequeue('restart', 'w-lost', 1, '1 second')});
like($leased, qr/^\d+$/, 'claimed one task with a 1-second lease');
is(query("SELECT state FROM orch_tasks WHERE task_id = $leased"),
    'executing', 'that task is executing');

# Crash.
$node->stop('immediate');
sleep 2;
$node->start;

is(query(q{SELECT count(*) FROM orch_tasks WHERE queue = 'restart'}),
    '200', 'all 200 tasks are there after the restart');
is( query(q{SELECT string_agg(task_id::text, ',' ORDER BY task_id)
              FROM orch_tasks WHERE queue = 'restart' AND state = 'completed'}),
    $completed_ids, 'the 50 completed tasks are still completed');
is( query(qq{SELECT count(*) FROM orch_tasks
              WHERE task_id IN ($completed_ids) AND result = '{"ok": true}'}),
    '50', 'their results survived');
is( query(qq{SELECT count(*) FROM (
                SELECT task_id FROM orch_events
                 WHERE task_id IN ($completed_ids) AND to_state = 'completed'
                 GROUP BY task_id HAVING count(*) = 1) s}),
    '50', 'each completed task has exactly one completed event');
is( query(qq{SELECT count(*) FROM orch_events
              WHERE task_id IN ($completed_ids) AND to_state = 'completed'}),
    '50', 'and no more than that');
is( query(q{SELECT count(*) FROM orch_tasks WHERE queue = 'restart' AND state = 'queued'}),
    '149', '149 tasks are still queued');
is(query("SELECT state FROM orch_tasks WHERE task_id = $leased"),
    'executing', 'the leased task is still executing (nothing ran while down)');
is( query("SELECT lease_expires_at < now() FROM orch_tasks WHERE task_id = $leased"),
    't', 'and its lease has expired');

# The next dequeue recovers the expired lease and hands out the queued rest.
my $rest = query(q{
    CREATE TABLE claimed2 AS
        SELECT task_id, lease_token, attempt FROM orch_dequeue('restart', 'w2', 200);
    SELECT count(*) || ' ' || count(DISTINCT task_id) FROM claimed2;});
is($rest, '149 149', 'the next dequeue hands out the 149 queued tasks, each once');
is( query(qq{SELECT count(*) FROM claimed2
              WHERE task_id IN ($completed_ids) OR task_id = $leased}),
    '0', 'none of them is a completed task or the recovered one (its retry is not due yet)');
is(query(q{SELECT count(*) FROM claimed2 WHERE attempt = 1}),
    '149', 'all of them on their first attempt');

is( query("SELECT state || ' ' || reason_code || ' ' || (retry_at IS NOT NULL) || ' ' || attempts
             FROM orch_tasks WHERE task_id = $leased"),
    'awaiting_tool lease_expired true 1',
    'the expired task was recovered into retry-wait (reason lease_expired)');
is( query("SELECT outcome || ' ' || error_class FROM orch_attempts WHERE task_id = $leased"),
    'lease_expired TRANSIENT',
    'its lost attempt is recorded as lease_expired, class TRANSIENT');

# Once the retry delay (1 s) has passed it is claimable again.
my $again = '';
for (my $i = 0; $i < 50 && $again eq ''; $i++)
{
    usleep(200_000);
    $again = query(q{SELECT task_id || ' ' || attempt FROM orch_dequeue('restart', 'w3', 10)});
}
is($again, "$leased 2", 'the recovered task is claimed again, attempt 2');

is( query(q{SELECT string_agg(state || '=' || n, ' ' ORDER BY state) FROM (
                SELECT state, count(*) AS n FROM orch_tasks
                 WHERE queue = 'restart' GROUP BY state) s}),
    'completed=50 executing=150', 'final states: 50 completed, 150 executing');

$node->stop;
done_testing();
