# t/040_workflow_kills.pl: workflow runs whose step tasks are worked by
# client processes that are killed with SIGKILL mid-task.
#
# WF_RUNS runs (default 30) of one workflow with a linear part and a 3-way
# fan-out/join, 6 steps in 4 stages, every step a task in queue wf40:
#
#     prep -> fan_a, fan_b, fan_c -> join (depends_on all three) -> finish
#
# are started up front.  4 worker processes (psql clients, the worker
# script of FaultHarness.pm) claim step tasks with a 2-second lease, record
# each execution's start in exec_log, "work" for up to 0.3 s and complete
# them; each completion advances its run (the next step's task is enqueued
# in the same transaction).  A maintainer calls orch_maintain() every 0.2 s.
# WF_KILLS times (default 20) a worker process is killed with SIGKILL --
# one that is in the middle of a step task it holds claimed (its execution
# is logged, the task still executing under its token), else a random one
# -- and a new worker takes its place; the killed claim's lease
# expires and is recovered (by orch_maintain or by the lazy recovery in
# orch_dequeue) as a TRANSIENT failure, and the step's task is retried
# (queue settings: no retry delay, budgets kills cannot exhaust).  The
# runs are started by this test, so FaultHarness's producer is not used.
#
# Pass criteria:
#   - every run succeeds (all its steps succeeded, its output has all six
#     steps) within a bounded time (WF_DRAIN_TIMEOUT, default 90 s);
#   - every step has exactly one task (the step's task_id), completed, whose
#     result is the step's output: a retry is an attempt of that task, never
#     a new task; no task outside the runs' steps;
#   - attempts: 1..attempts per task, all but the last lease_expired, the
#     last completed, failures = lease_expired attempts; some leases did
#     expire (the kills interrupted executions);
#   - no two executions of a step overlapped: (a) from the attempts alone,
#     a later attempt never started before an earlier one finished, nor
#     while the earlier one's lease was live (workers never heartbeat);
#     (b) from exec_log, no two executions with live leases intersect and
#     every accepted completion came within its lease; and the unique index
#     that allows one executing task per (run, step_key) is there;
#   - a step with dependencies started only after they had all finished
#     (the join after all three branches), and each run's join started once;
#   - events agree with the final states: each task's events form one chain
#     from received -> queued to its state, with one -> executing event per
#     attempt; each run has exactly (new) -> running, running -> succeeded;
#     each step exactly ready -> running (step_started), then for each
#     retry of its task running -> retrying (retry_scheduled) and retrying
#     -> running (retry_started), then running -> succeeded
#     (step_succeeded);
#   - the clients saw no unexpected SQLSTATE (only lease fencing, OR002 /
#     OR003, and connection loss), and pg_amcheck finds nothing.
#
# Knobs (environment): WF_RUNS, WF_KILLS, WF_DRAIN_TIMEOUT, SOAK_SEED.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use FaultHarness qw(env_knob fault_node query wait_for run_amcheck task_invariants_sql parse_counts);

my $runs  = env_knob('WF_RUNS',  30);
my $kills = env_knob('WF_KILLS', 20);
my $drain = env_knob('WF_DRAIN_TIMEOUT', 90);
my @steps = qw(prep fan_a fan_b fan_c join finish);
my $nsteps = scalar @steps;
my $queue  = 'wf40';
my $lease  = 2;

my $node = fault_node('workflow_kills');
my $db   = 'postgres';
my $run  = FaultHarness->new(
	node          => $node,
	label         => '040_workflow_kills',
	queue         => $queue,
	jobs          => $runs * $nsteps,    # the step tasks: progress and drain count them
	workers       => 4,
	lease_seconds => $lease,
	work_max      => 0.3);
# the queue (lease 2 s, no retry delay, large budgets), exec_log,
# complete_ack and the worker / maintainer scripts
$run->setup;

query($node, $db, <<'EOS');
SELECT orch_define('wf40_flow', '{
  "description": "040_workflow_kills: linear prep, a 3-way fan-out, a join, a final step",
  "policies": {"queue": "wf40"},
  "steps": [
    {"step_id": "prep",   "handler": "prep"},
    {"step_id": "fan_a",  "handler": "fan", "depends_on": ["prep"]},
    {"step_id": "fan_b",  "handler": "fan", "depends_on": ["prep"]},
    {"step_id": "fan_c",  "handler": "fan", "depends_on": ["prep"]},
    {"step_id": "join",   "handler": "join", "depends_on": ["fan_a", "fan_b", "fan_c"]},
    {"step_id": "finish", "handler": "finish", "depends_on": ["join"]}]}');
SELECT orch_publish('wf40_flow', 1);
EOS
query($node, $db,
	"SELECT orch_start('wf40_flow', jsonb_build_object('n', g)) FROM generate_series(1, $runs) g");
is(query($node, $db,
		"SELECT count(*) || ':' || count(*) FILTER (WHERE state = 'running') FROM orch.runs"),
	"$runs:$runs", "$runs runs started");
is(query($node, $db, "SELECT count(*) FROM orch.tasks WHERE queue = '$queue' AND step_key = 'prep'"),
	$runs, 'each run enqueued its first step');

# No producer: the runs exist already, the workers and the maintainer do
# the rest (FaultHarness starts a producer only until it is done).
$run->{producer_done} = 1;
my $t0 = time;
$run->start;

# kill -9 a worker process that holds a step task claimed and is working on
# it (its execution is logged and the task is still executing under its
# token), waiting for one to be (a loaded machine may have every worker
# between tasks, or restarting after the last kill, at the moment a fault
# is due); when none is within the bound, a random one
my $mid_task_kills = 0;
sub kill_mid_task
{
	my ($r) = @_;
	my @pids;
	my $until = time + 10;
	while (1)
	{
		my $names = FaultHarness::try_query($node, $db,
			"SELECT string_agg(DISTINCT l.worker, ' ') FROM exec_log l JOIN orch.tasks t"
			  . " ON t.id = l.task_id AND t.lease_token = l.lease_token WHERE t.state = 'executing'", 30)
		  // '';
		my %busy = map { $_ => 1 } split ' ', $names;
		@pids = grep { $busy{ $r->{procs}{$_}{name} // '' } } $r->worker_pids;
		last if @pids || time > $until;
		Time::HiRes::sleep(0.05);
	}
	if (@pids)
	{
		my $pid = $pids[ int(rand(@pids)) ];
		if (kill('KILL', $pid))
		{
			$r->{worker_kills}++;
			$mid_task_kills++;
			return $pid;
		}
	}
	return $r->kill_random_worker;
}

my @faults = map { [ 'worker kill', \&kill_mid_task ] } 1 .. $kills;
ok($run->inject(\@faults, max_jitter => 0.3), "injected $kills worker kills");
cmp_ok($mid_task_kills, '>=', int($kills / 2),
	"most kills hit a worker in the middle of a claimed step task ($mid_task_kills of $kills)");
is($run->{worker_kills} // 0, $kills, "$kills worker processes were killed with SIGKILL");
my @late = grep { $_->{pending} <= 0 } @{ $run->{faults} };
is(scalar(@late), 0, 'every kill landed while step tasks were pending');

# all step tasks completed (drain stops the processes)
$run->drain($drain);
my $all_done = wait_for(
	10,
	sub {
		query($node, $db,
			"SELECT count(*) FROM orch.runs WHERE definition = 'wf40_flow'"
			  . " AND state IN ('succeeded', 'failed', 'canceled')") == $runs;
	});
my $elapsed = time - $t0;
ok($all_done, sprintf('every run reached a terminal state (%.1f s after the workers started)', $elapsed));
cmp_ok($elapsed, '<', $drain + 30, "within the bound of ${drain} s (+ the shutdown of the clients)");

# ---------------------------------------------------------------------------
# Invariants
# ---------------------------------------------------------------------------
my $lease_iv = "interval '$lease seconds'";
my $expected_steps = join(',', map { "'$_'" } @steps);
my %c = %{ parse_counts(query($node, $db, <<EOS . task_invariants_sql($lease_iv))) };
CREATE TEMP TABLE rr AS SELECT * FROM orch.runs WHERE definition = 'wf40_flow';
CREATE TEMP TABLE rs AS SELECT s.* FROM orch.run_steps s JOIN rr ON rr.id = s.run_id AND rr.tenant_id = s.tenant_id;
CREATE TEMP TABLE qt AS SELECT * FROM orch.tasks WHERE queue = '$queue' OR run_id IN (SELECT id FROM rr);
CREATE TEMP TABLE qa AS SELECT a.* FROM orch.attempt_history a JOIN qt ON qt.id = a.task_id;
CREATE TEMP TABLE qe AS SELECT e.* FROM orch.history e JOIN qt ON qt.id = e.task_id;
CREATE TEMP TABLE re AS SELECT e.* FROM orch.history e JOIN rr ON rr.id = e.run_id
   WHERE e.entity IN ('run', 'run_step');
CREATE INDEX ON qt (id); CREATE INDEX ON qa (task_id); CREATE INDEX ON qe (task_id); CREATE INDEX ON re (run_id);
ANALYZE rr; ANALYZE rs; ANALYZE qt; ANALYZE qa; ANALYZE qe; ANALYZE re;
SELECT 'runs', count(*) FROM rr
UNION ALL SELECT 'runs_succeeded', count(*) FROM rr WHERE state = 'succeeded' AND reason_code = 'completed'
UNION ALL SELECT 'run_output_incomplete', count(*) FROM rr
   WHERE output IS NULL OR NOT (output ?& ARRAY[$expected_steps]) OR (SELECT count(*) FROM jsonb_object_keys(rr.output)) <> $nsteps
UNION ALL SELECT 'run_steps', count(*) FROM rs
UNION ALL SELECT 'steps_not_succeeded', count(*) FROM rs WHERE state <> 'succeeded'
UNION ALL SELECT 'runs_without_all_steps', count(*) FROM rr
   WHERE (SELECT array_agg(step_id ORDER BY ord) FROM rs WHERE rs.run_id = rr.id) IS DISTINCT FROM ARRAY[$expected_steps]
UNION ALL SELECT 'tasks', count(*) FROM qt
UNION ALL SELECT 'tasks_not_completed', count(*) FROM qt WHERE state <> 'completed'
UNION ALL SELECT 'steps_without_one_task', count(*) FROM rs
   WHERE (SELECT count(*) FROM qt WHERE qt.run_id = rs.run_id AND qt.step_key = rs.step_id) <> 1
UNION ALL SELECT 'tasks_not_a_steps_task', count(*) FROM qt
   WHERE NOT EXISTS (SELECT 1 FROM rs WHERE rs.run_id = qt.run_id AND rs.step_id = qt.step_key AND rs.task_id = qt.id)
UNION ALL SELECT 'step_output_not_task_result', count(*) FROM rs JOIN qt ON qt.id = rs.task_id
   WHERE rs.output IS DISTINCT FROM qt.result OR qt.result IS NULL
UNION ALL SELECT 'retried_tasks', count(*) FROM qt WHERE attempts > 1
UNION ALL SELECT 'lease_expired_attempts', count(*) FROM qa WHERE outcome = 'lease_expired'
UNION ALL SELECT 'attempt_sequence_bad', count(*) FROM qt
   WHERE qt.attempts <> (SELECT count(*) FROM qa WHERE qa.task_id = qt.id)
      OR qt.attempts <> (SELECT count(DISTINCT attempt) FROM qa WHERE qa.task_id = qt.id)
      OR qt.attempts <> coalesce((SELECT max(attempt) FROM qa WHERE qa.task_id = qt.id), 0)
      OR qt.failures <> (SELECT count(*) FROM qa WHERE qa.task_id = qt.id AND qa.outcome = 'lease_expired')
      OR EXISTS (SELECT 1 FROM qa WHERE qa.task_id = qt.id AND qa.attempt < qt.attempts
                   AND qa.outcome <> 'lease_expired')
      OR NOT EXISTS (SELECT 1 FROM qa WHERE qa.task_id = qt.id AND qa.attempt = qt.attempts
                       AND qa.outcome = 'completed')
UNION ALL SELECT 'attempts_overlap', count(*) FROM qa a
   JOIN qa b ON b.task_id = a.task_id AND b.attempt > a.attempt
   WHERE b.started_at < a.finished_at OR b.started_at < a.started_at
UNION ALL SELECT 'unique_executing_index', count(*) FROM pg_index i
   JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname = 'orch' AND c.relname = 'tasks_run_step_running_idx' AND i.indisunique
     AND pg_get_indexdef(i.indexrelid) LIKE '%(tenant_id, run_id, step_key)%state = ''executing''%'
UNION ALL SELECT 'started_before_deps_finished', count(*) FROM rs s
   JOIN rs d ON d.run_id = s.run_id AND d.step_id = ANY (s.deps)
   WHERE s.started_at IS NULL OR d.finished_at IS NULL OR s.started_at < d.finished_at
UNION ALL SELECT 'joins_started', count(*) FROM re WHERE entity = 'run_step' AND note = 'join'
   AND reason_code = 'step_started'
UNION ALL SELECT 'run_events_bad', count(*) FROM rr
   WHERE (SELECT string_agg(coalesce(from_state, '-') || '>' || to_state || ':' || reason_code, ' ' ORDER BY id)
            FROM re WHERE re.run_id = rr.id AND re.entity = 'run')
         IS DISTINCT FROM '->running:started running>succeeded:completed'
UNION ALL SELECT 'step_events_bad', count(*) FROM rs
   WHERE (SELECT string_agg(from_state || '>' || to_state || ':' || reason_code, ' ' ORDER BY id)
            FROM re WHERE re.run_id = rs.run_id AND re.entity = 'run_step' AND re.note = rs.step_id)
         !~ '^ready>running:step_started( running>retrying:retry_scheduled retrying>running:retry_started)* running>succeeded:step_succeeded\$'
UNION ALL SELECT 'step_retry_events_not_attempts', count(*) FROM rs
   WHERE (SELECT count(*) FROM re WHERE re.run_id = rs.run_id AND re.entity = 'run_step'
             AND re.note = rs.step_id AND re.reason_code = 'retry_started')
         IS DISTINCT FROM (SELECT t.attempts - 1 FROM orch.tasks t WHERE t.id = rs.task_id)
UNION ALL SELECT 'step_events_unknown_step', count(*) FROM re
   WHERE entity = 'run_step' AND NOT EXISTS (SELECT 1 FROM rs WHERE rs.run_id = re.run_id AND rs.step_id = re.note)
EOS
my $z = sub {
	my ($key, $what) = @_;
	is($c{$key} // 'missing', 0, $what) or diag("$key = " . ($c{$key} // 'missing'));
};
my $ntasks = $runs * $nsteps;

is($c{runs}, $runs, "$runs runs of the workflow");
is($c{runs_succeeded}, $runs, 'every run succeeded (reason completed)');
$z->('run_output_incomplete', "every run's output has the outputs of all $nsteps steps");
is($c{run_steps}, $ntasks, "$nsteps steps per run");
$z->('runs_without_all_steps', 'every run has exactly the steps of the definition, in order');
$z->('steps_not_succeeded', 'every step succeeded');
is($c{tasks}, $ntasks, "exactly $ntasks step tasks (one per step: retries are attempts, not new tasks)");
$z->('steps_without_one_task', 'every step has exactly one task');
$z->('tasks_not_a_steps_task', "every task is its step's task (run_steps.task_id)");
$z->('tasks_not_completed', 'every step task completed');
$z->('step_output_not_task_result', "every step's output is its task's result");
cmp_ok($c{lease_expired_attempts} // 0, '>', 0,
	'the kills interrupted executions (some leases expired and were recovered)');
cmp_ok($c{retried_tasks} // 0, '>', 0, 'some step tasks were retried (more than one attempt)');
$z->('completed_attempts_not_1', "one 'completed' attempt per task");
$z->('attempt_sequence_bad',
	'attempts are 1..attempts, all but the last lease_expired, the last completed, failures counted');
$z->('attempts_overlap', "no attempt of a step's task started before an earlier one had finished");
$z->('claimed_during_live_lease', "no step's task was claimed again while a lease on it was live");
cmp_ok($c{executions} // 0, '>=', $ntasks, 'executions were logged');
$z->('executions_unaccounted', 'every logged execution has exactly one attempt row (no claim vanished)');
$z->('overlap_live', 'no two executions of a step with live leases overlap in time');
$z->('completed_after_lease', 'every accepted execution completed within its lease');
$z->('ack_not_completing', 'every completion acknowledged to a worker is the recorded completion');
is($c{unique_executing_index}, 1,
	'a unique index allows one executing task per (tenant, run, step_key)');
$z->('started_before_deps_finished',
	'no step started before all its dependencies had finished (the join after all three branches)');
is($c{joins_started}, $runs, 'each run started its join exactly once');
$z->('event_chain_broken', "every task's events form one chain from received -> queued");
$z->('last_event_not_state', "every task's last event is its state");
$z->('claim_events_not_attempts', 'one -> executing event per attempt');
$z->('terminal_events_not_1', 'one terminal event per task');
$z->('run_events_bad', 'every run has exactly the events (new) -> running, running -> succeeded');
$z->('step_events_bad',
	'every step has exactly the events ready -> running, (running -> retrying -> running)*, running -> succeeded');
$z->('step_retry_events_not_attempts', "one retrying -> running event per retry of a step's task");
$z->('step_events_unknown_step', 'no step event names a step the run does not have');

# what reached the clients: only fencing of late workers and connection loss
my %expected = map { $_ => 1 } qw(OR002 OR003 57P01 57P02 57P03 08000 08001 08003 08006);
my %codes;
for my $role (qw(worker maintainer))
{
	my $path = "$run->{dir}/$role.log";
	next unless -e $path;
	open my $fh, '<', $path or die "cannot read $path: $!";
	while (my $l = <$fh>)
	{
		$codes{"$role:$1"}++ if $l =~ /(?:ERROR|FATAL):\s+([0-9A-Z]{5}):/;
	}
	close $fh;
}
my @bad = grep { my ($code) = /:(\w+)$/; !$expected{$code} } sort keys %codes;
is(scalar(@bad), 0, 'the clients saw no unexpected SQLSTATE (only lease fencing and connection loss)')
  or diag('unexpected: ' . join(', ', map { "$_ x$codes{$_}" } @bad) . "\n(logs in $run->{dir})");
note('client errors: ' . (join(', ', map { "$_ x$codes{$_}" } sort keys %codes) || 'none'));

run_amcheck($node, $db);

diag(sprintf(
		'WF-SUMMARY runs=%d steps=%d tasks=%d kills=%d mid_task_kills=%d lease_expired=%d retried_tasks=%d executions=%d seed=%s elapsed=%.1fs',
		$runs, $nsteps, $c{tasks} // -1, $run->{worker_kills} // 0, $mid_task_kills,
		$c{lease_expired_attempts} // -1, $c{retried_tasks} // -1,
		$c{executions} // -1, $run->{seed}, $elapsed));
$node->stop;
done_testing();
