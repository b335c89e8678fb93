# t/020_key_ordering.pl: concurrency keys under real concurrency.
#
# 1,000 tasks over 10 concurrency keys (limit 1 per key, 100 tasks each) are
# worked off by 4 concurrent worker processes (psql clients).  500 tasks are
# enqueued before the workers start, the other 500 by a producer process
# while they run.  Each worker iteration: claim one task (commits), log its
# start (clock_timestamp(), own committed statement), sleep 1-5 ms, log its
# end (own committed statement), complete it.
#
# Checks: every task completed exactly once; within a key no two executions
# overlap (by the logged times and by the event order); within a key the
# tasks started in enqueue order; the workers really ran in parallel (tasks
# of different keys overlapped) and the gate really held tasks back; no
# client saw an error.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run ();
use Time::HiRes qw(time);

my $KEYS      = 10;
my $TASKS     = 1000;
my $PRELOAD   = 500;
my $WORKERS   = 4;
my $ITERS     = 6000;    # upper bound of iterations per worker script
my $TIMEOUT   = 150;     # seconds for the whole run

my $t0   = time;
my $node = PostgreSQL::Test::Cluster->new('key_ordering');
$node->init;
$node->start;

sub query { return $node->safe_psql('postgres', $_[0]); }

query('CREATE EXTENSION orchestrator');
query(q{SELECT orch_create_queue('keyord', '{"concurrency_key_limit": 1, "lease": "10 minutes"}')});
query(q{CREATE TABLE exec_log (task_id bigint PRIMARY KEY, worker text NOT NULL,
                              started timestamptz NOT NULL, ended timestamptz)});

# Task i (1..1000) has key k((i-1) div 4 mod 10): runs of 4 consecutive
# tasks share a key, so that in plain FIFO order workers would pick several
# tasks of one key at once; each key gets 100 tasks.  Enqueue order is i order.
sub enqueue_sql
{
	my ($from, $to) = @_;
	return "SELECT count(orch_enqueue('keyord', jsonb_build_object('i', i), "
	  . "concurrency_key => 'k' || ((i - 1) / 4 % $KEYS))) FROM generate_series($from, $to) i;";
}

# Preload in 50 transactions of 10.
for (my $a = 1; $a <= $PRELOAD; $a += $KEYS)
{
	query(enqueue_sql($a, $a + $KEYS - 1));
}
is( query(q{SELECT count(*) FILTER (WHERE ready_at IS NOT NULL) || ' ' || count(*) FILTER (WHERE gated)
              FROM orch.tasks WHERE queue = 'keyord'}),
	"$KEYS " . ($PRELOAD - $KEYS),
	'before the workers start: one claimable task per key, the other 490 wait gated');

my $dir = PostgreSQL::Test::Utils::tempdir;

# Worker script: claim / log start / work / log end / complete, until all
# tasks are completed.
my $iter = <<'EOS';
SELECT count(*) = :total AS all_done FROM orch.tasks WHERE queue = 'keyord' AND state = 'completed' \gset
\if :all_done
\q
\endif
\unset tid
SELECT d.task_id AS tid, d.lease_token AS tok
  FROM (SELECT 1) one LEFT JOIN LATERAL orch_dequeue('keyord', :'worker', 1) d ON true \gset
\if :{?tid}
INSERT INTO exec_log (task_id, worker, started) VALUES (:tid, :'worker', clock_timestamp());
SELECT pg_sleep(0.001 + random() * 0.004);
UPDATE exec_log SET ended = clock_timestamp() WHERE task_id = :tid;
SELECT orch_complete(:tid, :'tok', jsonb_build_object('worker', :'worker')) AS done \gset
\else
SELECT pg_sleep(0.01);
\endif
EOS
open my $fh, '>', "$dir/worker.sql" or die $!;
print $fh "\\set VERBOSITY verbose\n", $iter x $ITERS;
close $fh;

# Producer script: the other 500 tasks, 10 per transaction, spread out.
open $fh, '>', "$dir/producer.sql" or die $!;
print $fh "\\set VERBOSITY verbose\n";
for (my $a = $PRELOAD + 1; $a <= $TASKS; $a += $KEYS)
{
	print $fh enqueue_sql($a, $a + $KEYS - 1), "\nSELECT pg_sleep(0.03);\n";
}
close $fh;

my $connstr = $node->connstr('postgres');
my (%out, %err, @h);
for my $name ((map { "worker$_" } 1 .. $WORKERS), 'producer')
{
	my $script = $name eq 'producer' ? 'producer.sql' : 'worker.sql';
	$out{$name} = '';
	$err{$name} = '';
	push @h,
	  [
		$name,
		IPC::Run::start(
			[
				'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=0',
				'-v', "worker=$name", '-v', "total=$TASKS",
				'-d', $connstr, '-f', "$dir/$script"
			],
			'<', \undef, '>', \$out{$name}, '2>', \$err{$name},
			IPC::Run::timeout($TIMEOUT))
	  ];
}
my $finished = 1;
for my $p (@h)
{
	my ($name, $h) = @$p;
	eval { $h->finish; 1 } or do { $finished = 0; diag("$name: $@"); eval { $h->kill_kill } };
}
ok($finished, 'the producer and the workers finished within the time limit');
for my $name (sort keys %err)
{
	is($err{$name}, '', "$name: no error or warning reached the client");
}

# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------
is( query(q{SELECT count(*) || ' ' || count(*) FILTER (WHERE state = 'completed')
                   || ' ' || count(DISTINCT concurrency_key)
              FROM orch.tasks WHERE queue = 'keyord'}),
	"$TASKS $TASKS $KEYS", 'all 1,000 tasks over 10 keys completed');
is(query(q{SELECT count(*) FROM orch.tasks WHERE queue = 'keyord' AND attempts <> 1}),
	'0', 'each task ran exactly once (one attempt, no lease lost)');
is( query(q{SELECT count(*) || ' ' || count(DISTINCT task_id) || ' ' || count(ended)
              FROM exec_log}),
	"$TASKS $TASKS $TASKS", 'every execution logged its start and its end');
is(query(q{SELECT count(*) FROM orch.tasks WHERE queue = 'keyord' AND (gated OR ready_at IS NOT NULL)}),
	'0', 'nothing is left gated or claimable');

# No overlap within a key: each start comes after every earlier end of its key.
is( query(q{
	SELECT count(*) FROM (
	    SELECT l.started,
	           max(l.ended) OVER (PARTITION BY t.concurrency_key ORDER BY l.started
	                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
	      FROM exec_log l JOIN orch.tasks t ON t.id = l.task_id) x
	 WHERE x.started < x.prev_end}),
	'0', 'no two executions of one key overlap (logged start/end times)');
# ... and by the audit trail: per key, executing and leaving executing alternate.
is( query(q{
	SELECT coalesce(max(running), 0) || ' ' || coalesce(min(running), 0) FROM (
	    SELECT sum(CASE WHEN e.to_state = 'executing' THEN 1 ELSE -1 END)
	             OVER (PARTITION BY t.concurrency_key ORDER BY e.id) AS running
	      FROM orch.history e JOIN orch.tasks t ON t.id = e.task_id
	     WHERE t.queue = 'keyord' AND (e.to_state = 'executing' OR e.from_state = 'executing')) x}),
	'1 0', 'per key, at most one task was executing at any point of the event order');

# Start order equals enqueue order, per key.
is( query(q{
	SELECT count(*) FROM (
	    SELECT row_number() OVER (PARTITION BY t.concurrency_key ORDER BY l.started) AS by_start,
	           row_number() OVER (PARTITION BY t.concurrency_key ORDER BY (t.payload ->> 'i')::int) AS by_enqueue
	      FROM exec_log l JOIN orch.tasks t ON t.id = l.task_id) x
	 WHERE by_start <> by_enqueue}),
	'0', 'within each key the tasks started in enqueue order (logged start times)');
is( query(q{
	SELECT count(*) FROM (
	    SELECT row_number() OVER (PARTITION BY t.concurrency_key ORDER BY e.id) AS by_claim,
	           row_number() OVER (PARTITION BY t.concurrency_key ORDER BY (t.payload ->> 'i')::int) AS by_enqueue
	      FROM orch.history e JOIN orch.tasks t ON t.id = e.task_id
	     WHERE t.queue = 'keyord' AND e.to_state = 'executing') x
	 WHERE by_claim <> by_enqueue}),
	'0', 'within each key the claims (events) came in enqueue order');

# The test was not vacuous: work ran in parallel across keys and workers.
cmp_ok(
	query(q{
	SELECT count(*) FROM exec_log a JOIN orch.tasks ta ON ta.id = a.task_id,
	       exec_log b JOIN orch.tasks tb ON tb.id = b.task_id
	 WHERE a.task_id < b.task_id AND ta.concurrency_key <> tb.concurrency_key
	   AND a.started < b.ended AND b.started < a.ended}),
	'>', 0, 'executions of different keys did overlap (the workers ran in parallel)');
is(query(q{SELECT count(DISTINCT worker) FROM exec_log}),
	$WORKERS, 'every worker executed tasks');
is( query(q{SELECT count(DISTINCT lease_owner) FROM orch.tasks WHERE queue = 'keyord'}),
	$WORKERS, 'the tasks record the same workers as their lease owners');

$node->stop;
diag(sprintf('020_key_ordering: %.1f s', time - $t0));
done_testing();
