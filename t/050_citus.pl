# t/050_citus.pl: scale-out on Citus.
#
# Skipped, with the reason, unless Citus is installed for this server
# (pg_available_extensions; Debian does not package it: docs/citus.md
# builds it from its source release).
#
# A coordinator and two workers (Citus 13, MX: metadata on every node).
# CREATE EXTENSION orchestrator on the coordinator (Citus creates it on the
# workers too); orch_distribute(8) distributes the tables by tenant_id,
# co-located with orch.tasks, makes the small ones reference tables, and
# gives each worker its own id range; called again it changes nothing.
# No Citus setting is needed beyond shared_preload_libraries.
#
# Two tenants whose shards are on different workers each get ten tasks
# (singles, a batch, an idempotent replay, a conflicting key -> OR004), and
# run the whole task lifecycle from the coordinator: claim (a claim must
# name its tenant -> else 0A000), complete (singly and in a batch), fail
# TRANSIENT (retry-wait, then claimed again), fail NON_RETRYABLE (a dead
# letter, re-driven with orch_retry), a lease left to expire (recovered by
# orch_maintain, which works tenant by tenant), heartbeat, cancel, and the
# retention purge.  Checked per tenant: states, attempts rows against the
# attempt counters, every event under its task's tenant, the rows stored on
# the worker that holds the tenant's shard.
#
# Routing, measured with citus.multi_task_query_log_level: a tenant-scoped
# claim (probe, recovery, wake-up, claim) runs only single-shard statements
# (the setting at 'error' raises on any other).  Calls by id: in a fresh session of a caller bound to no tenant, orch_complete and
# orch_fail run one multi-shard statement each (the lookup of the task's
# tenant), and the rest single-shard; in the session that claimed the tasks
# (or enqueued them), orch_complete, orch_complete_batch, orch_fail,
# orch_heartbeat and orch_command_result run none; nor does a role bound to
# one tenant, even in a fresh session.  The remembered tenant is a routing
# hint only: after SET ROLE to a role bound to another tenant (one, or
# several) the task does not exist (OR005), and a task purged by retention
# after the session remembered it gives OR005 after one lookup.  While the
# worker that holds one tenant's shard is stopped, the other tenant's claim
# and completion still work (same session, and a role bound to it), and a
# fresh unbound session's completion (its lookup touches every shard) fails.
#
# The rest of the task API on Citus: a rate limit (OR006 past it, a window
# per tenant), await_tool / resume, await_confirmation / confirm, commands
# (replay by key, result recorded in the command's tenant), and
# orch_drop_queue(force) cancelling the open tasks of both tenants.
# Workflows: a run with a task step, a map step, a human
# approval (approved by a role bound to no tenant, from a fresh session),
# a decision and a skipped branch runs to success in each tenant, its start
# and its step completions single-shard; a saga compensates in its tenant;
# orch_cancel_run cancels the open task and moves the run once; pause,
# resume, orch_retry_run and orch_reject work by id; a role
# bound to one tenant starts and works its runs and gets OR005 for another
# tenant's; steps finished through a worker node progress the run; a run
# past its deadline fails in orch_maintain.  In a database with Citus
# installed but the tables left local, a workflow runs and a claim needs no
# tenant.
#
# Metrics: rows stored before orch_distribute move into
# the shards unchanged; every node folds the shards it holds: after tasks
# are enqueued, claimed, completed and failed in two tenants on different
# workers, each counter is exact, a second fold (orch_metrics_refresh,
# orch_maintain) adds nothing, folds bounded by max_rows (per shard) go on
# where the last one stopped and count each row once, the rows from before
# the distribution are counted once, a bound role gets 42501 from
# orch_metrics_refresh and its own counters in the Prometheus text; with
# one worker stopped the fold counts the other worker's rows and warns, and
# the stopped worker's rows are counted once it is back.
#
# A role bound to one tenant (not a superuser) reads only its tenant through
# orch_status, orch_history, the statistics views and the Prometheus text.
#
# A call per row of a query on the distributed tables (pushed down to a
# shard by Citus) is refused with 0A000 and a hint, on the coordinator and
# on a worker node, and changes nothing; a by-id call made on a worker node
# works as on the coordinator.
#
# The rest of the API: queue settings (read on a worker node), pause and
# resume, orch_reprocess, a concurrency limit, the retry decision,
# definitions (validate, read, deprecate), drift probes run at the gate on
# the worker and orch_acknowledge_drift, orch_caller_tenants and
# orch_unbind_tenant, a state machine on a table of the user's, and the
# pg_cron schedule when pg_cron is installed.
#
# Under load (a claim-and-complete loop per tenant), the worker of one tenant
# stopped: the other tenant's work goes on to the end during the outage; once
# the worker is back, leases are recovered and every task is completed
# exactly once, none lost.
#
# A worker added later gets its id range from orch_distribute called again.
#
# A distributed 0.7.0 installation (three tenants, tasks in every state, a
# task enqueued through a worker, a lease held) updated with
# docs/citus-upgrade-0.7.0-0.8.0.sql: the script refuses, naming it and
# changing nothing, while a view of the user depends on the extension; then
# it runs, and every task, event, attempt and idempotency key is as it was,
# the held lease completes, a key replays, the worker's ids go on past the
# stored ones, no id repeats, and the counters count from the update on.
#
# Ids: a task enqueued through a worker takes that worker's id range
# (group id << 48), and no two tasks or events share an id.
use strict;
use warnings;

use File::Basename;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $coord = PostgreSQL::Test::Cluster->new('coordinator');
$coord->init;
$coord->start;
my $available = $coord->safe_psql('postgres',
	"SELECT count(*) FROM pg_available_extensions WHERE name = 'citus'");
if ($available ne '1')
{
	$coord->stop;
	plan skip_all =>
	  'Citus is not installed for this server (Debian does not package it; see docs/citus.md)';
}
$coord->stop;

my @workers = map { PostgreSQL::Test::Cluster->new("worker$_") } (1, 2);
$_->init for @workers;
# pg_cron on the coordinator too, when it is installed (orch_schedule_maintenance)
my $pkglibdir = `pg_config --pkglibdir`;
chomp $pkglibdir;
my $have_cron = -e "$pkglibdir/pg_cron.so";
for my $node ($coord, @workers)
{
	my $preload = ($node == $coord && $have_cron) ? 'citus,pg_cron' : 'citus';
	$node->append_conf('postgresql.conf', <<EOC);
shared_preload_libraries = '$preload'
max_connections = 60
log_statement = none
EOC
	$node->append_conf('postgresql.conf', "cron.database_name = 'postgres'\n") if $preload =~ /pg_cron/;
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION citus');
}
# (not on the workers: they do not load it)
$coord->safe_psql('postgres', 'SET citus.enable_ddl_propagation = off; CREATE EXTENSION pg_cron') if $have_cron;
$coord->safe_psql('postgres', sprintf(
	"SELECT citus_set_coordinator_host('%s', %d)", $coord->host, $coord->port));
$coord->safe_psql('postgres', sprintf(
	"SELECT citus_add_node('%s', %d)", $_->host, $_->port)) for @workers;

sub q1 { return $coord->safe_psql('postgres', $_[0]); }

# psql on the coordinator: (exit code, stdout, stderr)
sub try_sql
{
	my ($sql, $node) = @_;
	$node //= $coord;
	my ($out, $err) = ('', '');
	my $rc = $node->psql('postgres', $sql, stdout => \$out, stderr => \$err,
		on_error_stop => 1);
	return ($rc, $out, $err);
}

# Paced by state, never by the clock: wait until every row of orch.tasks
# that matches $where satisfies $cond (compared with now(), as the extension
# compares its leases and retry times), polling every 0.1 s up to the TAP
# timeout (PG_TEST_TIMEOUT_DEFAULT, 180 s by default).  No matching row: no
# wait.
sub wait_until_tasks
{
	my ($what, $where, $cond) = @_;
	$coord->poll_query_until('postgres',
		"SELECT coalesce(bool_and($cond), true) FROM orch.tasks WHERE $where")
	  or die "gave up waiting until $what";
}

sub sqlstate_of
{
	my ($sql) = @_;
	my ($rc, $out, $err) = try_sql("\\set VERBOSITY sqlstate\n$sql");
	return $rc == 0 ? '00000' : ($err =~ /ERROR:\s+([0-9A-Z]{5})/ ? $1 : "?: $err");
}

# ---------------------------------------------------------------------------
# Install and distribute
# ---------------------------------------------------------------------------
q1('CREATE EXTENSION orchestrator');
for my $w (@workers)
{
	is($w->safe_psql('postgres',
			"SELECT extversion FROM pg_extension WHERE extname = 'orchestrator'"),
		q1("SELECT extversion FROM pg_extension WHERE extname = 'orchestrator'"),
		'CREATE EXTENSION on the coordinator created the extension on ' . $w->name);
}
# Work from before the distribution, partly folded into the metrics on one
# node: its rows move into the shards as they are (no lifecycle trigger
# rewrites them on the way), and each is counted once (below)
q1(q{SELECT orch_create_queue('pre')});
q1(q{SELECT count(orch_enqueue('pre', '{}', tenant => 'pre')) FROM generate_series(1, 2)});
q1('SELECT orch_metrics_refresh()');
q1(q{SELECT orch_enqueue('pre', '{}', tenant => 'pre')});
my $pre_rows_sql = q{SELECT string_agg(concat_ws('/', id, state, enqueue_event_id, created_xact, created_at), ','
                       ORDER BY id) FROM orch.tasks WHERE tenant_id = 'pre'};
my $pre_rows = q1($pre_rows_sql);
like(q1(q{SELECT string_agg(object || ': ' || action, E'\n') FROM orch_distribute(8)}),
	qr/orch\.tasks: distributed by tenant_id/, 'orch_distribute distributes orch.tasks');
is(q1(q{SELECT string_agg(logicalrelid::text || '=' || partmethod::text, ',' ORDER BY logicalrelid::text)
          FROM pg_dist_partition WHERE logicalrelid::text IN
          ('orch.tasks', 'orch.events', 'orch.attempts', 'orch.idempotency_keys', 'orch.runs',
           'orch.queues', 'orch.state_machines', 'orch.concurrency_limits')}),
	'orch.attempts=h,orch.concurrency_limits=n,orch.events=h,orch.idempotency_keys=h,'
	  . 'orch.queues=n,orch.runs=h,orch.state_machines=n,orch.tasks=h',
	'task tables are hash-distributed, the small ones reference tables');
is(q1(q{SELECT count(DISTINCT colocationid) FROM pg_dist_partition
         WHERE partmethod = 'h' AND logicalrelid::text LIKE 'orch.%'}),
	'1', 'every distributed table is co-located with orch.tasks');
is(q1(q{SELECT count(*) FROM orch_distribute() WHERE action = 'already a Citus table'}),
	q1(q{SELECT count(*) FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid
	      WHERE logicalrelid::text LIKE 'orch.%' AND NOT c.relispartition}),
	'orch_distribute called again leaves every table as it is');
is(q1($pre_rows_sql), $pre_rows, 'the tasks stored before orch_distribute are in the shards as they were');
is(q1('SHOW citus.enable_unsafe_triggers'), 'off',
	'no Citus setting was needed (orch_distribute sets what it needs for itself)');

# Two tenants on different workers
my $placement = q{SELECT p.groupid FROM pg_dist_placement p
  WHERE p.shardid = get_shard_id_for_distribution_column('orch.tasks', '%s')};
my @candidates = qw(acme globex initech umbrella hooli stark wayne wonka);
my $ta = $candidates[0];
my $ga = q1(sprintf($placement, $ta));
my ($tb) = grep { q1(sprintf($placement, $_)) ne $ga } @candidates[1 .. $#candidates];
ok(defined $tb, "tenants $ta and " . ($tb // '?') . ' are on different workers');
my %node_of = ($ta => $ga, $tb => q1(sprintf($placement, $tb)));

# ---------------------------------------------------------------------------
# Enqueue: ten tasks per tenant
# ---------------------------------------------------------------------------
q1(q{SELECT orch_create_queue('jobs', '{"max_attempts": 3, "initial_delay": "1 s", "max_delay": "1 s"}')});
for my $t ($ta, $tb)
{
	q1("SELECT orch_enqueue('jobs', jsonb_build_object('n', g, 't', '$t'), tenant => '$t')"
		  . ' FROM generate_series(1, 5) g');
	is(q1("SELECT count(*) FROM orch_enqueue_batch('jobs',"
			  . " ARRAY(SELECT jsonb_build_object('n', g, 't', '$t') FROM generate_series(6, 9) g),"
			  . " tenant => '$t')"), '4', "$t: a batch of 4 enqueued");
	my $k1 = q1("SELECT orch_enqueue('jobs', '{\"n\": 10}', idempotency_key => 'k10', tenant => '$t')");
	is(q1("SELECT orch_enqueue('jobs', '{\"n\": 10}', idempotency_key => 'k10', tenant => '$t')"),
		$k1, "$t: an idempotent replay returns the same task");
	is(sqlstate_of("SELECT orch_enqueue('jobs', '{\"n\": 11}', idempotency_key => 'k10', tenant => '$t')"),
		'OR004', "$t: the same key with another payload -> OR004");
	is(q1("SELECT count(*) FROM orch.tasks WHERE tenant_id = '$t' AND state = 'queued'"), '10',
		"$t: ten tasks queued");
}
is(sqlstate_of("SELECT * FROM orch_dequeue('jobs', 'w')"), '0A000',
	'a claim that names no tenant -> 0A000 on Citus');

# ---------------------------------------------------------------------------
# Claim: only single-shard statements
# ---------------------------------------------------------------------------
my %claimed;
for my $t ($ta, $tb)
{
	my ($rc, $out, $err) = try_sql(
		"BEGIN; SET LOCAL citus.multi_task_query_log_level = 'error';\n"
		  . "SELECT task_id || ':' || lease_token FROM orch_dequeue('jobs', 'w-$t', 9, tenant => '$t'); COMMIT;");
	is($rc, 0, "$t: a tenant-scoped claim runs no multi-shard statement") or diag($err);
	$claimed{$t} = [ map { [ split /:/ ] } split /\n/, $out ];
	is(scalar @{ $claimed{$t} }, 9, "$t: nine tasks claimed");
	my ($rc2, $out2, $err2) = try_sql(
		"BEGIN; SET LOCAL citus.multi_task_query_log_level = 'error';\n"
		  . "SELECT task_id || ':' || lease_token FROM orch_dequeue('jobs', 'w-$t', 1, '1 second', tenant => '$t'); COMMIT;");
	is($rc2, 0, "$t: a claim with a short lease") or diag($err2);
	push @{ $claimed{$t} }, [ split /:/, $out2 ];
}

# ---------------------------------------------------------------------------
# Finish: complete, complete_batch, fail (retry / dead letter), heartbeat
# ---------------------------------------------------------------------------
for my $t ($ta, $tb)
{
	my @c = @{ $claimed{$t} };
	# 0-2: orch_complete; 3-5: one batch; 6, 7: TRANSIENT; 8: NON_RETRYABLE; 9: left to expire
	for my $i (0 .. 2)
	{
		my ($rc, $out, $err) = try_sql(
			"SET citus.multi_task_query_log_level = 'notice';\n"
			  . "SELECT orch_complete($c[$i][0], '$c[$i][1]', '{\"ok\": true}');");
		is($out, 'completed', "$t: orch_complete of task $c[$i][0]") or diag($err);
		my $multi = () = $err =~ /NOTICE:\s+multi-task query about to be executed/g;
		is($multi, 1, "$t: in a fresh session, orch_complete runs one multi-shard statement (the tenant lookup)")
		  if $i == 0;
	}
	is(q1(sprintf("SELECT orch_complete_batch(ARRAY[%s]::bigint[], ARRAY['%s']::uuid[])",
				join(',', map { $c[$_][0] } 3 .. 5), join("','", map { $c[$_][1] } 3 .. 5))),
		'3', "$t: orch_complete_batch of three");
	is(q1("SELECT orch_heartbeat($c[6][0], '$c[6][1]')"), 'executing', "$t: heartbeat");
	for my $i (6, 7)
	{
		is(q1("SELECT state || '/' || reason_code FROM orch_fail($c[$i][0], '$c[$i][1]', 'TRANSIENT', 'flaky')"),
			'awaiting_tool/retry_scheduled', "$t: TRANSIENT failure of task $c[$i][0] -> retry");
	}
	my ($rc, $out, $err) = try_sql(
		"SET citus.multi_task_query_log_level = 'notice';\n"
		  . "SELECT state || '/' || reason_code FROM orch_fail($c[8][0], '$c[8][1]', 'NON_RETRYABLE', 'bad input');");
	is($out, 'failed/non_retryable', "$t: NON_RETRYABLE -> failed (a dead letter)") or diag($err);
	my $multi = () = $err =~ /NOTICE:\s+multi-task query about to be executed/g;
	is($multi, 1, "$t: in a fresh session, orch_fail runs one multi-shard statement (the tenant lookup)");
	is(sqlstate_of("SELECT orch_complete($c[8][0], '$c[8][1]')"), 'OR002',
		"$t: completing a failed task -> OR002");
	is(sqlstate_of("SELECT orch_complete($c[0][0], gen_random_uuid())"), 'OR002',
		"$t: a completed task is terminal -> OR002");
}
is(sqlstate_of(sprintf("SELECT orch_complete_batch(ARRAY[%d, %d]::bigint[], ARRAY['%s', '%s']::uuid[])",
			$claimed{$ta}[9][0], $claimed{$tb}[9][0], $claimed{$ta}[9][1], $claimed{$tb}[9][1])),
	'0A000', 'a batch across two tenants -> 0A000, nothing completed');

# ---------------------------------------------------------------------------
# Maintenance tenant by tenant: the short leases expire and are recovered
# ---------------------------------------------------------------------------
wait_until_tasks('the short leases have expired',
	"id IN ($claimed{$ta}[9][0], $claimed{$tb}[9][0]) AND state = 'executing'",
	'lease_expires_at <= now()');
is(q1(q{SELECT count FROM orch_maintain() WHERE action = 'leases_recovered'}), '2',
	'orch_maintain recovers the expired lease of each tenant');
for my $t ($ta, $tb)
{
	my $id = $claimed{$t}[9][0];
	is(q1("SELECT state || '/' || reason_code FROM orch.tasks WHERE id = $id AND tenant_id = '$t'"),
		'awaiting_tool/lease_expired', "$t: the abandoned task waits for its retry");
	is(q1("SELECT outcome FROM orch.attempts WHERE task_id = $id AND tenant_id = '$t'"),
		'lease_expired', "$t: its attempt is recorded as lease_expired");
}

# the retries come due after 1 s: claimed again (the claim wakes them:
# still single-shard) and completed
wait_until_tasks('the retries are due', "queue = 'jobs' AND state = 'awaiting_tool' AND retry_at IS NOT NULL",
	'retry_at <= now()');
for my $t ($ta, $tb)
{
	my ($rc, $out, $err) = try_sql(
		"BEGIN; SET LOCAL citus.multi_task_query_log_level = 'error';\n"
		  . "SELECT task_id || ':' || lease_token FROM orch_dequeue('jobs', 'w2-$t', 10, tenant => '$t'); COMMIT;");
	is($rc, 0, "$t: a claim that wakes due retries runs no multi-shard statement") or diag($err);
	my @again = map { [ split /:/ ] } split /\n/, $out;
	is(scalar @again, 3, "$t: the two retried and the recovered task are claimed again");
	q1("SELECT orch_complete($_->[0], '$_->[1]')") for @again;
	my $dead = $claimed{$t}[8][0];
	my $copy = q1("SELECT orch_retry($dead)");
	is(q1("SELECT tenant_id || '/' || state || '/' || retry_of FROM orch.tasks WHERE id = $copy"),
		"$t/queued/$dead", "$t: orch_retry re-drives the dead letter in its tenant");
	is(q1("SELECT orch_cancel($copy, 'not needed')"), 'cancelled', "$t: cancel");

	is(q1("SELECT string_agg(state || '=' || n, ',' ORDER BY state) FROM"
			  . " (SELECT state, count(*) n FROM orch.tasks WHERE tenant_id = '$t' GROUP BY state) s"),
		'cancelled=1,completed=9,failed=1', "$t: 9 completed, 1 failed, 1 cancelled");
	is(q1("SELECT (SELECT sum(attempts) FROM orch.tasks WHERE tenant_id = '$t')"
			  . " - (SELECT count(*) FROM orch.attempts WHERE tenant_id = '$t')"), '0',
		"$t: one attempt row per attempt");
	is(q1("SELECT count(*) FROM orch.history e WHERE e.tenant_id = '$t' AND e.task_id IS NOT NULL"
			  . " AND NOT EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id = e.task_id AND t.tenant_id = e.tenant_id)"),
		'0', "$t: every event is under its task's tenant");
	is(q1("SELECT count(*) FROM orch.history WHERE tenant_id = '$t' AND to_state = 'completed'"), '9',
		"$t: one completion event per completed task");

	# the rows are where the tenant's shard is
	my $shard = q1("SELECT get_shard_id_for_distribution_column('orch.tasks', '$t')");
	my ($holder) = grep {
		$_->safe_psql('postgres', 'SELECT groupid FROM pg_dist_local_group') eq $node_of{$t}
	} @workers;
	is($holder->safe_psql('postgres', "SELECT count(*) FROM orch.tasks_$shard WHERE tenant_id = '$t'"),
		'11', "$t: its 11 tasks are stored on " . $holder->name);
}

# ---------------------------------------------------------------------------
# The rest of the task API on Citus: rate limits, tool and confirmation
# waits, commands, dropping a queue with work in two tenants
# ---------------------------------------------------------------------------
q1(q{SELECT orch_create_queue('limited', '{"rate_limit": {"count": 1, "per": "1 hour", "on_exceed": "error"}}')});
q1("SELECT orch_enqueue('limited', '{}', owner => 'o', tenant => '$ta')");
is(sqlstate_of("SELECT orch_enqueue('limited', '{}', owner => 'o', tenant => '$ta')"), 'OR006',
	'a rate-limited enqueue past the limit -> OR006');
is(q1("SELECT orch_enqueue('limited', '{}', owner => 'o', tenant => '$tb') > 0"), 't',
	'the same owner in another tenant has its own window');
{
	my ($id, $tok) = split /:/, q1("SELECT task_id || ':' || lease_token FROM orch_dequeue('limited', 'w', tenant => '$ta')");
	is(q1("SELECT orch_await_tool($id, '$tok', '{\"tool\": \"x\"}')"), 'awaiting_tool', 'await_tool');
	is(q1("SELECT orch_resume($id, '{\"r\": 1}')"), 'awaiting_tool', 'resume: claimable again');
	($id, $tok) = split /:/, q1("SELECT task_id || ':' || lease_token FROM orch_dequeue('limited', 'w', tenant => '$ta')");
	is(q1("SELECT orch_await_confirmation($id, '$tok', '{\"q\": \"ok?\"}')"), 'awaiting_user_confirmation',
		'await_confirmation');
	q1("SELECT orch_confirm($id, true, 'alice')");
	($id, $tok) = split /:/, q1("SELECT task_id || ':' || lease_token FROM orch_dequeue('limited', 'w', tenant => '$ta')");
	is(q1("SELECT orch_complete($id, '$tok')"), 'completed', 'claimed again after the confirmation, completed');
	my $cmd = q1("SELECT command_id FROM orch_command('email', 'c-1', '{\"to\": \"x\"}', tenant => '$tb')");
	is(q1("SELECT replayed FROM orch_command('email', 'c-1', '{\"to\": \"x\"}', tenant => '$tb')"), 't',
		'a command replayed by its key');
	is(q1("SELECT orch_command_result($cmd, true, '{\"sent\": 1}')"), 'succeeded', 'command result recorded');
	is(q1("SELECT status || '/' || tenant_id FROM orch.commands WHERE id = $cmd"), "succeeded/$tb",
		'the command is in its tenant');
	q1("SELECT orch_enqueue('limited', '{}', tenant => '$ta')");
	q1("SELECT orch_drop_queue('limited', true)");
	is(q1("SELECT count(*) FROM orch.tasks WHERE queue = 'limited' AND state <> 'completed'"
			. " AND reason_code IS DISTINCT FROM 'queue_dropped'"), '0',
		'orch_drop_queue(force) cancels the open tasks of both tenants');
	my $ctask = q1("SELECT task_id FROM orch_tasks WHERE queue = 'commands' AND tenant_id = '$tb'");
	is(q1("SELECT orch_cancel($ctask, 'handled elsewhere')"), 'cancelled', 'the command\'s task cancelled');
}

# ---------------------------------------------------------------------------
# A worker's progress and release, and the bulk actions, per tenant
# ---------------------------------------------------------------------------
q1("SELECT orch_create_queue('keep')");
for my $t ($ta, $tb)
{
	q1("SELECT orch_enqueue_batch('keep', ARRAY['{}', '{}', '{}']::jsonb[], tenant => '$t')");
	my ($id, $tok) = split /:/, q1("SELECT task_id || ':' || lease_token FROM orch_dequeue('keep', 'wk', tenant => '$t')");
	q1("SELECT orch_progress($id, '$tok', '{\"done\": 1}')");
	like(q1("SELECT state || '/' || (lease_expires_at > now()) FROM orch_heartbeat($id, '$tok', '1 minute', '{\"done\": 2}')"),
		qr{^executing/true$}, "$t: heartbeat with progress returns the new expiry");
	is(q1("SELECT orch_release($id, '$tok')"), 'awaiting_tool', "$t: release");
	is(q1("SELECT progress ->> 'done' FROM orch.tasks WHERE id = $id AND tenant_id = '$t'"), '2',
		"$t: the progress is kept on the task");
	my ($id2, $tok2, $att) = split /:/, q1(
		"SELECT task_id || ':' || lease_token || ':' || attempt FROM orch_dequeue('keep', 'wk', 3, tenant => '$t') WHERE task_id = $id");
	is($att, '1', "$t: the released task is claimed again with the attempt it gave back");
	is(q1("SELECT count(*) FROM orch_cancel_where('{\"queue\": \"keep\", \"state\": [\"executing\"]}', 'bulk')"), '3',
		"$t: orch_cancel_where cancels the tenant's three executing tasks");
}
is(q1("SELECT count(*) FROM orch.tasks WHERE queue = 'keep' AND state = 'cancelled'"), '6',
	'each tenant cancelled its own tasks');
is(q1("SELECT count(*) FROM orch.attempts WHERE outcome = 'released'"), '2', 'one released attempt per tenant');

# ---------------------------------------------------------------------------
# Unknown ids: OR005, as on one node (no statement across the shards with a
# lock); and calls that name their tenant are delegated to its worker
# ---------------------------------------------------------------------------
is(sqlstate_of('SELECT orch_complete(123456789, gen_random_uuid())'), 'OR005', 'orch_complete of an unknown task -> OR005');
is(sqlstate_of('SELECT orch_heartbeat(123456789, gen_random_uuid())'), 'OR005', 'orch_heartbeat of an unknown task -> OR005');
is(sqlstate_of(q{SELECT * FROM orch_fail(123456789, gen_random_uuid(), 'TRANSIENT')}), 'OR005',
	'orch_fail of an unknown task -> OR005');
is(sqlstate_of('SELECT orch_complete_batch(ARRAY[123456789]::bigint[], ARRAY[gen_random_uuid()])'), 'OR005',
	'orch_complete_batch of an unknown task -> OR005');
is(sqlstate_of('SELECT orch_retry(123456789)'), 'OR005', 'orch_retry of an unknown task -> OR005');
is(sqlstate_of('SELECT orch_command_result(123456789, true)'), 'OR005', 'orch_command_result of an unknown command -> OR005');
is(sqlstate_of(q{SELECT * FROM orch_dequeue('jobs', 'w')}), '0A000',
	'a claim without a tenant, outside a transaction block, is refused (not delegated: Citus 13.2.2 crashes on a NULL distribution argument)');

# ---------------------------------------------------------------------------
# A call per row of a query on a distributed table runs on a shard, where
# Citus allows no further distributed query: a clear 0A000 with what to do
# instead, not Citus's XX000
# ---------------------------------------------------------------------------
q1("SELECT orch_create_queue('perrow')");
q1("SELECT orch_enqueue('perrow', '{}', tenant => '$ta')");
for my $case (
	[ "SELECT orch_heartbeat(t.id, gen_random_uuid()) FROM orch.tasks t WHERE t.tenant_id = '$ta' AND t.queue = 'perrow'",
		'on one shard' ],
	[ "SELECT orch_heartbeat(t.id, gen_random_uuid()) FROM orch.tasks t WHERE t.queue = 'perrow'",
		'on every shard' ])
{
	my ($rc, $out, $err) = try_sql("\\set VERBOSITY verbose\n$case->[0]");
	like($err, qr/ERROR:\s+0A000: orchestrator functions cannot run inside a query on a shard/,
		"a call per row of a query $case->[1] -> 0A000") or diag($err);
	like($err, qr/HINT:.*statement of its own/, "... with a hint ($case->[1])");
}
# the same on a worker node (Citus MX): a call of its own works as on the
# coordinator, a call per row is refused alike
{
	my ($rc, $out, $err) = try_sql("\\set VERBOSITY sqlstate\nSELECT orch_complete(123456789, gen_random_uuid())", $workers[0]);
	like($err, qr/ERROR:\s+OR005/, 'on a worker node, orch_complete of an unknown task -> OR005') or diag($err);
	($rc, $out, $err) = try_sql("\\set VERBOSITY verbose\nSELECT orch_heartbeat(t.id, gen_random_uuid()) FROM orch.tasks t WHERE t.queue = 'perrow'", $workers[0]);
	like($err, qr/ERROR:\s+0A000: orchestrator functions cannot run inside a query on a shard/,
		'on a worker node, a call per row of a query on every shard -> 0A000') or diag($err);
}
is(q1("SELECT count(*) FROM orch.tasks WHERE queue = 'perrow' AND state = 'queued'"), '1',
	'the refused calls changed nothing');

# ---------------------------------------------------------------------------
# Tenant isolation for a role bound to a tenant, as on one node: what it reads of tasks, history and metrics is its tenant's only
# ---------------------------------------------------------------------------
q1("CREATE ROLE cit_rb LOGIN; GRANT orch_reader, orch_worker, orch_producer TO cit_rb");
q1("SELECT orch_bind_tenant('cit_rb', '$tb')");
q1("SELECT orch_enqueue('perrow', '{}', tenant => '$tb')");
{
	my $tid_a = q1("SELECT min(id) FROM orch.tasks WHERE tenant_id = '$ta'");
	my $tid_b = q1("SELECT min(id) FROM orch.tasks WHERE tenant_id = '$tb'");
	my $as_rb = sub { return sqlstate_of("SET ROLE cit_rb;\n$_[0]"); };
	is($as_rb->("SELECT * FROM orch_status($tid_a)"), 'OR005', "bound to $tb: orch_status of a $ta task -> OR005");
	is($as_rb->("SELECT * FROM orch_status($tid_b)"), '00000', "bound to $tb: orch_status of its own task");
	is($as_rb->("SELECT * FROM orch_history($tid_a)"), 'OR005', "bound to $tb: orch_history of a $ta task -> OR005");
	is($as_rb->("SELECT * FROM orch_history($tid_b)"), '00000', "bound to $tb: orch_history of its own task");
	my $m = q1("SET ROLE cit_rb; SELECT orch_metrics_prometheus()");
	unlike($m, qr/tenant="\Q$ta\E"/, "bound to $tb: no metric series of $ta");
	like($m, qr/tenant="\Q$tb\E"/, "bound to $tb: its own series are there");
	for my $view (qw(orch_queue_stats orch_review_queue orch_error_stats))
	{
		is(q1("SET ROLE cit_rb; SELECT count(*) FROM $view WHERE tenant_id <> '$tb'"), '0',
			"bound to $tb: $view has no row of another tenant");
	}
	cmp_ok(q1("SELECT count(*) FROM orch_queue_stats WHERE tenant_id = '$ta'"), '>', 0,
		"unbound (superuser): orch_queue_stats has the rows of $ta");
	my $all = q1("SELECT orch_metrics_prometheus()");
	like($all, qr/tenant="\Q$ta\E"/, "unbound (superuser): the series of $ta are there");
}

# ---------------------------------------------------------------------------
# Metrics folded on every node: each node folds the shards
# it holds, in its own transaction ids; every transition is counted once,
# whether a shard's trigger or a call through the coordinator wrote it
# ---------------------------------------------------------------------------
q1("CREATE ROLE cit_adm LOGIN; GRANT orch_admin TO cit_adm");
q1(q{SELECT orch_create_queue('mq', '{"initial_delay": "1 h"}')});
my $mtotal = sub {
	my ($t, $m, $l1, $queue) = @_;
	return q1("SELECT coalesce(sum(value), 0) FROM orch.metric_totals WHERE tenant_id = '$t'"
		  . " AND queue = '" . ($queue // 'mq') . "' AND metric = '$m'" . (defined $l1 ? " AND l1 = '$l1'" : ''));
};
my $mq_counts = sub {
	my ($t) = @_;
	return join(',', map { $mtotal->($t, @$_) } (['enqueued'], ['started'], ['finished', 'completed'],
		['retry', 'TRANSIENT'], ['attempt', 'completed'], ['attempt', 'failed']));
};
for my $t ($ta, $tb)
{
	q1("SELECT count(orch_enqueue('mq', jsonb_build_object('n', g), tenant => '$t')) FROM generate_series(1, 4) g");
	q1("SELECT count(orch_complete(task_id, lease_token)) FROM orch_dequeue('mq', 'w', 2, tenant => '$t')");
	q1("SELECT f.state FROM orch_dequeue('mq', 'w', 1, tenant => '$t') d,"
		  . " LATERAL orch_fail(d.task_id, d.lease_token, 'TRANSIENT', 'x') f");
}
cmp_ok(q1('SET ROLE cit_adm; SELECT orch_metrics_refresh()'), '>', 0,
	'orch_metrics_refresh on Citus, as an orch_admin that is not a superuser, folds the new rows');
for my $t ($ta, $tb)
{
	is($mq_counts->($t), '4,3,2,1,2,1',
		"$t: enqueued 4, started 3, completed 2, one TRANSIENT retry, attempts 2 completed and 1 failed: each counted once");
}
is($mtotal->('pre', 'enqueued', undef, 'pre'), '3',
	'the tasks enqueued before orch_distribute are counted once (two folded on one node, one on its worker)');
q1('SELECT orch_metrics_refresh()');
q1('SELECT count(*) FROM orch_maintain()');
is($mq_counts->($ta) . ' ' . $mq_counts->($tb), '4,3,2,1,2,1 4,3,2,1,2,1',
	'folded again (orch_metrics_refresh, orch_maintain): nothing is counted twice');
cmp_ok($mtotal->('', 'maintenance_runs', undef, ''), '>=', 1, 'an orch_maintain pass counts itself');
# bounded folds: each shard's fold reads at most about max_rows rows (its
# transactions in order, each whole); with max_rows 1, three transactions
# of one enqueue in each tenant's shard take three calls of one row per
# shard, and the call that reads less than max_rows (none) is the one that
# moves metrics_as_of
q1(q{SELECT orch_create_queue('mq3')});
for my $i (1 .. 3)
{
	q1("SELECT orch_enqueue('mq3', '{}', tenant => '$_')") for ($ta, $tb);
}
q1(q{UPDATE orch.metric_state SET refreshed_at = '2000-01-01 00:00:00+00'});
{
	my (@read, @as_of);
	for my $call (1 .. 4)
	{
		push @read, q1('SELECT orch_metrics_refresh(1)');
		push @as_of, q1(q{SELECT refreshed_at = '2000-01-01 00:00:00+00' FROM orch.metric_state});
	}
	is(join(',', @read), '2,2,2,0', 'orch_metrics_refresh(1) on Citus: a transaction per shard a call, then none');
	is(join(',', @as_of), 't,t,t,f', 'metrics_as_of moves with the call that read less than max_rows');
	is($mtotal->($ta, 'enqueued', undef, 'mq3') . ',' . $mtotal->($tb, 'enqueued', undef, 'mq3'), '3,3',
		'each enqueue counted once across the bounded folds');
}
is(q1(q{SELECT count(*) FROM run_command_on_shards('orch.tasks',
          $$SELECT 1 FROM orch.metric_shard_state WHERE id = (regexp_match('%s', '_([0-9]+)$'))[1]::bigint$$)
         WHERE success AND result = '1'}), '8', 'each of the 8 shards keeps its fold state on the node that holds it');
is(sqlstate_of("SET ROLE cit_rb; SELECT orch_metrics_refresh()"), '42501',
	"a role bound to $tb may not run the fold of every tenant");
{
	my $m = q1("SET ROLE cit_rb; SELECT orch_metrics_prometheus()");
	like($m, qr/^orch_tasks_enqueued_total\{tenant="\Q$tb\E",queue="mq"\} 4$/m,
		"bound to $tb: its folded counters in the Prometheus text");
	unlike($m, qr/tenant="\Q$ta\E"/, "bound to $tb: and none of $ta");
}
# a task claimed, folded, retried and claimed again: its first claim, which
# the task row recorded, is written out as an event as the task leaves
# executing for its retry wait (with the transaction it was made in) and is
# not counted again
q1(q{SELECT orch_create_queue('mq2', '{"initial_delay": "1 s", "max_delay": "1 s"}')});
q1("SELECT orch_enqueue('mq2', '{}', tenant => '$ta')");
my ($rid, $rtok) = split /\|/, q1("SELECT task_id || '|' || lease_token FROM orch_dequeue('mq2', 'w', 1, tenant => '$ta')");
q1('SELECT orch_metrics_refresh()');
q1("SELECT state FROM orch_fail($rid, '$rtok', 'TRANSIENT', 'again')");
wait_until_tasks('the retry is due', "id = $rid AND tenant_id = '$ta'", 'retry_at <= now()');
is(q1("SELECT count(orch_complete(task_id, lease_token)) FROM orch_dequeue('mq2', 'w', 1, tenant => '$ta')"), '1',
	"$ta: the retried task is claimed again (and completed)");
q1('SELECT orch_metrics_refresh()');
is($mtotal->($ta, 'started', undef, 'mq2'), '2',
	'two claims, two started: the first claim, written out as the task left executing, is not counted again');
isnt(q1(q{SELECT metrics_as_of FROM orch_queue_stats WHERE queue = 'mq' LIMIT 1}), '',
	'orch_queue_stats says when the counters were folded');

# ---------------------------------------------------------------------------
# Every view, for roles that are not superusers: a reader
# bound to no tenant reads every row, as the superuser does; a bound one its
# tenant's rows only.
# ---------------------------------------------------------------------------
q1("CREATE ROLE cit_ru LOGIN; GRANT orch_reader TO cit_ru");
for my $view (qw(orch_tasks orch_events orch_attempts orch_queues orch_commands orch_dead_letters
	orch_definitions orch_runs orch_run_steps orch_queue_stats orch_error_stats orch_durations
	orch_review_queue orch_maintenance_log))
{
	is(sqlstate_of("SET ROLE cit_ru;\nSELECT count(*) FROM $view"), '00000', "unbound reader: $view is readable");
	is(q1("SET ROLE cit_ru; SELECT count(*) FROM $view"), q1("SELECT count(*) FROM $view"),
		"unbound reader: $view has what the superuser reads");
	is(sqlstate_of("SET ROLE cit_rb;\nSELECT count(*) FROM $view"), '00000', "bound to $tb: $view is readable");
}
for my $view (qw(orch_tasks orch_events orch_attempts orch_commands orch_dead_letters orch_runs orch_run_steps))
{
	is(q1("SET ROLE cit_rb; SELECT count(*) FROM $view WHERE tenant_id <> '$tb'"), '0',
		"bound to $tb: $view has no row of another tenant");
}
cmp_ok(q1("SET ROLE cit_ru; SELECT count(*) FROM orch_tasks WHERE tenant_id = '$ta'"), '>', 0,
	"unbound reader: orch_tasks has the tasks of $ta");
# a worker node reads the same (Citus took the views' change there)
is($workers[0]->safe_psql('postgres', "SET ROLE cit_ru; SELECT count(*) FROM orch_tasks"),
	q1("SELECT count(*) FROM orch_tasks"), 'unbound reader on a worker node: orch_tasks has every row');
is(q1("SET ROLE cit_ru; SELECT count(lease_token) FROM orch_events"), '0',
	'unbound reader (not orch_admin): no lease token in orch_events');

# ---------------------------------------------------------------------------
# A claim that recovers an expired lease first: still single-shard
# ---------------------------------------------------------------------------
q1(q{SELECT orch_create_queue('short', '{"initial_delay": "1 s", "max_delay": "1 s"}')});
q1("SELECT orch_enqueue('short', '{}', tenant => '$ta')");
q1("SELECT count(*) FROM orch_dequeue('short', 'w', 1, '1 second', tenant => '$ta')");
wait_until_tasks('the lease in queue short has expired', "queue = 'short' AND state = 'executing'",
	'lease_expires_at <= now()');
{
	my ($rc, $out, $err) = try_sql(
		"BEGIN; SET LOCAL citus.multi_task_query_log_level = 'error';\n"
		  . "SELECT count(*) FROM orch_dequeue('short', 'w', 1, tenant => '$ta'); COMMIT;");
	is($rc, 0, 'a claim that recovers an expired lease runs no multi-shard statement') or diag($err);
	is(q1("SELECT reason_code FROM orch.tasks WHERE queue = 'short'"), 'lease_expired',
		'the claim recovered the expired lease (retry after 1 s)');
	wait_until_tasks('the retry in queue short is due',
		"queue = 'short' AND state = 'awaiting_tool' AND retry_at IS NOT NULL", 'retry_at <= now()');
	my ($id, $tok) = split /:/, q1("SELECT task_id || ':' || lease_token FROM orch_dequeue('short', 'w', 1, tenant => '$ta')");
	is(q1("SELECT orch_complete($id, '$tok')"), 'completed', 'and the task completes on its second attempt');
}

# ---------------------------------------------------------------------------
# A task's timeout caps its lease (claim and heartbeat, in UTC on Citus) and
# its recovery is recorded as timed_out
# ---------------------------------------------------------------------------
# (10 s: the claim, its check and the heartbeat must all run before the
# capped lease expires, also on a busy machine; the wait below is by state)
q1("SELECT orch_enqueue('short', '{}', tenant => '$tb', timeout => '10 seconds')");
{
	my ($id, $tok) = split /:/, q1("SELECT task_id || ':' || lease_token FROM orch_dequeue('short', 'w', 1, tenant => '$tb')");
	is(q1("SELECT lease_expires_at - claimed_at FROM orch.tasks WHERE id = $id"), '00:00:10',
		'the claim caps the lease at the task timeout');
	is(q1("SELECT orch_heartbeat($id, '$tok')"), 'executing', 'heartbeat');
	is(q1("SELECT lease_expires_at - claimed_at FROM orch.tasks WHERE id = $id"), '00:00:10',
		'a heartbeat does not extend the lease past the timeout');
	wait_until_tasks('the lease capped by the timeout has expired', "id = $id AND state = 'executing'",
		'lease_expires_at <= now()');
	is(q1("SELECT count FROM orch_maintain() WHERE action = 'leases_recovered'"), '1', 'the timed-out task is recovered');
	is(q1("SELECT outcome FROM orch.attempts WHERE task_id = $id AND tenant_id = '$tb'"), 'timed_out',
		'and its attempt is recorded as timed_out');
}

# ---------------------------------------------------------------------------
# Concurrency keys: a finished keyed task hands its slot over (the promotion
# runs in the shard's trigger, on the worker)
# ---------------------------------------------------------------------------
q1(q{SELECT orch_create_queue('keyed')});
q1("SELECT orch_enqueue('keyed', jsonb_build_object('n', g), concurrency_key => 'k', tenant => '$ta')"
	  . ' FROM generate_series(1, 2) g');
for my $round (1, 2)
{
	my @got = map { [ split /:/ ] } split /\n/, q1(
		"SELECT task_id || ':' || lease_token FROM orch_dequeue('keyed', 'w', 5, tenant => '$ta')");
	is(scalar @got, 1, "keys, round $round: one task of the key claimed (limit 1)");
	is(q1("SELECT orch_complete($got[0][0], '$got[0][1]')"), 'completed', "keys, round $round: completed");
}
is(q1("SELECT count(*) FROM orch.tasks WHERE queue = 'keyed' AND state = 'completed'"), '2',
	'keys: the second task got the slot when the first finished');

# ---------------------------------------------------------------------------
# Queue settings cached per backend are dropped on every node when a queue
# changes (the trigger fires on the reference table's shard on each node)
# ---------------------------------------------------------------------------
q1(q{SELECT orch_create_queue('cached')});
my %sess = (coordinator => $coord->background_psql('postgres'),
	worker => $workers[0]->background_psql('postgres'));
for my $where (sort keys %sess)
{
	$sess{$where}->query_safe("SELECT orch_enqueue('cached', '{}', tenant => '$ta')");
	is($sess{$where}->query_safe("SELECT count(*) FROM orch_dequeue('cached', 'w', tenant => '$ta')"), '1',
		"a session on the $where claims (its queue settings now cached)");
}
q1(q{SELECT orch_pause_queue('cached')});
for my $where (sort keys %sess)
{
	$sess{$where}->query_safe("SELECT orch_enqueue('cached', '{}', tenant => '$ta')");
	is($sess{$where}->query_safe("SELECT count(*) FROM orch_dequeue('cached', 'w', tenant => '$ta')"), '0',
		"the session on the $where sees the pause made from another session");
}
q1(q{SELECT orch_resume_queue('cached')});
is($sess{worker}->query_safe("SELECT count(*) FROM orch_dequeue('cached', 'w', 5, tenant => '$ta')"), '2',
	'and the resume');
$sess{$_}->quit for keys %sess;
q1("SELECT orch_drop_queue('cached', true)");

# ---------------------------------------------------------------------------
# Workflows on Citus: a run's rows are on its tenant's
# shard; its progression runs there, in the trigger of the statement that
# finished a step's task.  Each step below is claimed and finished in a
# transaction of its own (a task a step's completion enqueues on a worker
# carries that worker's clock, so a claim in the same transaction, whose
# clock is the coordinator's, may not see it yet).
# ---------------------------------------------------------------------------
q1(q{SELECT orch_define('wf', '{"steps": [{"step_id": "a", "queue": "wq", "handler": "a"}]}')});
like(q1(q{SELECT orch_publish('wf', 1)}), qr/^[0-9a-f]{64}$/, 'orch_publish on Citus returns the content hash');
q1(q{SELECT orch_define('wf_full', '{"steps": [
    {"step_id": "fetch", "queue": "wq", "handler": "fetch", "compensation": {"handler": "unfetch", "queue": "wq_undo"}},
    {"step_id": "each", "queue": "wq", "handler": "resize", "depends_on": ["fetch"], "map": {"over": "$.input.items"}},
    {"step_id": "gate", "type": "human_approval", "depends_on": ["each"], "timeout": "1 hour"},
    {"step_id": "route", "type": "decision", "depends_on": ["gate"], "targets": ["big", "small"],
     "rules": [{"when": {"path": "$.steps.fetch.output.size", "op": "ge", "value": 10}, "then": "big"}],
     "default": "small"},
    {"step_id": "big", "queue": "wq", "handler": "big"},
    {"step_id": "small", "queue": "wq", "handler": "small"}]}')});
q1(q{SELECT orch_publish('wf_full', 1)});
q1(q{SELECT orch_define('wf_saga', '{"steps": [
    {"step_id": "reserve", "queue": "wq", "handler": "reserve", "compensation": {"handler": "release", "queue": "wq_undo"}},
    {"step_id": "charge", "queue": "wq", "handler": "charge", "depends_on": ["reserve"], "retry_policy": {"max_attempts": 1}}]}')});
q1(q{SELECT orch_publish('wf_saga', 1)});
q1(q{SELECT orch_define('wf_one', '{"steps": [
    {"step_id": "one", "queue": "wq", "handler": "one", "retry_policy": {"max_attempts": 1}}]}')});
q1(q{SELECT orch_publish('wf_one', 1)});
q1(q{SELECT orch_define('wf_late', '{"policies": {"deadline": "1 second"},
    "steps": [{"step_id": "slow", "queue": "wq", "handler": "slow"}]}')});
q1(q{SELECT orch_publish('wf_late', 1)});
q1("CREATE ROLE cit_ap LOGIN; GRANT orch_reader, orch_approver, orch_producer TO cit_ap");

# claim one task of queue q for tenant t and finish it: complete with result
# (a JSON text), or fail with class cls; its step key, or '(nothing)'
sub work_step
{
	my ($q, $t, %o) = @_;
	my $node = $o{node} // $coord;
	my $who = $o{role} ? "SET ROLE $o{role}; " : '';
	my $tenant = $o{role} ? '' : ", tenant => '$t'";
	my $out = $node->safe_psql('postgres',
		"${who}SELECT task_id || ' ' || lease_token || ' ' || step_key FROM orch_dequeue('$q', 'wf-w'$tenant)");
	return '(nothing)' if $out eq '';
	my ($id, $tok, $key) = split / /, $out;
	if ($o{cls})
	{
		$node->safe_psql('postgres', "${who}SELECT orch_fail($id, '$tok', '$o{cls}', 'failed: $o{cls}')");
	}
	else
	{
		my $res = $o{result} // '{}';
		$node->safe_psql('postgres', "${who}SELECT orch_complete($id, '$tok', '$res')");
	}
	return $key;
}

# run state: steps with their states (and compensation states)
sub run_st
{
	my ($run, $t) = @_;
	return q1("SELECT r.state || ': ' || string_agg(s.step_id || '=' || s.state || coalesce('+' || s.comp_state, ''),"
		  . " ' ' ORDER BY s.ord) FROM orch.runs r JOIN orch.run_steps s ON s.run_id = r.id AND s.tenant_id = r.tenant_id"
		  . " WHERE r.id = $run AND r.tenant_id = '$t' GROUP BY r.state");
}

my %run;
for my $t ($ta, $tb)
{
	# a run, its start and its first step's completion: single-shard statements only
	my ($rc, $out, $err) = try_sql(
		"SET citus.multi_task_query_log_level = 'error';\n"
		  . "SELECT orch_start('wf_full', '{\"items\": [\"x\", \"y\"]}', tenant => '$t');");
	is($rc, 0, "$t: orch_start on Citus runs no multi-shard statement") or diag($err);
	$run{$t} = $out;
	is(q1("SELECT tenant_id || '/' || state FROM orch.runs WHERE id = $run{$t}"), "$t/running",
		"$t: the run is stored under its tenant");
	is(q1("SELECT count(*) FROM orch_queues WHERE queue IN ('wq', 'wq_undo', 'approvals')"), '3',
		"$t: orch_start created the queues its steps use");
	# claimed and completed in one session (which knows the task's tenant)
	($rc, $out, $err) = try_sql(
		"SET citus.multi_task_query_log_level = 'error';\n"
		  . "SELECT task_id AS id, lease_token AS tok FROM orch_dequeue('wq', 'w', tenant => '$t') \\gset\n"
		  . "SELECT orch_complete(:id, :'tok', '{\"size\": 12}');");
	is($rc, 0, "$t: claiming and completing a step's task (the run progresses on its shard)"
		  . " runs no multi-shard statement") or diag($err);
	is(run_st($run{$t}, $t),
		'running: fetch=succeeded+armed each=running gate=pending route=pending big=pending small=pending',
		"$t: the map step started after fetch");
	is(join(' ', sort(work_step('wq', $t), work_step('wq', $t))), 'each#0 each#1', "$t: the map's two items");
	is(run_st($run{$t}, $t),
		'waiting_approval: fetch=succeeded+armed each=succeeded gate=awaiting_approval route=pending big=pending small=pending',
		"$t: the run waits for the approval");
	is(q1("SELECT output FROM orch.run_steps WHERE run_id = $run{$t} AND tenant_id = '$t' AND step_id = 'each'"),
		'[{}, {}]', "$t: the map's output, in item order");
}
# the approver (a role bound to no tenant) approves from a fresh session:
# the run is found by its id on its shard
for my $t ($ta, $tb)
{
	is(q1("SET ROLE cit_ap; SELECT orch_approve($run{$t}, 'gate', 'ref-$t', 'ops', 'fine')"), 'running',
		"$t: orch_approve as an approver bound to no tenant");
	is(work_step('wq', $t), 'big', "$t: the decision chose big (fetch's size is 12)");
	is(run_st($run{$t}, $t),
		'succeeded: fetch=succeeded+armed each=succeeded gate=succeeded route=succeeded big=succeeded small=skipped',
		"$t: the run succeeded");
	my $status = q1("SELECT orch_run_status($run{$t}) -> 'run' ->> 'state'");
	is($status, 'succeeded', "$t: orch_run_status");
	is(q1("SELECT count(*) FROM orch.events WHERE run_id = $run{$t} AND tenant_id = '$t'"
			  . " AND entity = 'run' AND to_state = 'succeeded'"), '1', "$t: one run event to succeeded");
}

# a failure compensates in reverse completion order, on the tenant's shard
for my $t ($ta, $tb)
{
	my $r = q1("SELECT orch_start('wf_saga', '{}', tenant => '$t')");
	is(work_step('wq', $t), 'reserve', "$t: saga: reserve");
	is(work_step('wq', $t, cls => 'NON_RETRYABLE'), 'charge', "$t: saga: charge fails for good");
	is(run_st($r, $t), 'running: reserve=succeeded+running charge=failed', "$t: saga: compensating");
	is(work_step('wq_undo', $t), 'reserve:compensate', "$t: saga: the compensation task");
	is(run_st($r, $t), 'failed: reserve=succeeded+done charge=failed', "$t: saga: failed, compensated");
}

# cancelling a run cancels its open task once: the task's trigger on the
# shard does not progress the run a second time
{
	my $r = q1("SELECT orch_start('wf_saga', '{}', tenant => '$ta')");
	my $task = q1("SELECT task_id FROM orch_dequeue('wq', 'w', tenant => '$ta')");
	is(q1("SET ROLE cit_ap; SELECT orch_cancel_run($r, 'withdrawn')"), 'canceled',
		"$ta: orch_cancel_run (a role bound to no tenant, a fresh session)");
	is(q1("SELECT state || '/' || reason_code FROM orch.tasks WHERE id = $task AND tenant_id = '$ta'"),
		'cancelled/run_canceled', "$ta: its open task is cancelled");
	is(q1("SELECT string_agg(coalesce(from_state, '') || '>' || to_state, ' ' ORDER BY id) FROM orch.events"
			  . " WHERE run_id = $r AND tenant_id = '$ta' AND entity = 'run'"),
		'>running running>canceled', "$ta: the run went to canceled once");
	is(q1("SELECT orch_cancel_run($r)"), 'canceled', "$ta: orch_cancel_run again: idempotent");
}

# signals are not supported on Citus: refused, nothing stored; a run's
# status (with no signals) still reads
{
	my $r = q1("SELECT orch_start('wf_saga', '{}', tenant => '$ta')");
	is(sqlstate_of("SELECT orch_signal($r, 'go')"), '0A000', "$ta: orch_signal -> 0A000 on Citus");
	is(q1("SELECT count(*) FROM orch.signals"), '0', 'no signal was stored');
	is(q1("SELECT (orch_run_status($r) ? 'signals')::text || '/' || (orch_run_status($r) -> 'run' ->> 'state')"),
		'false/running', "$ta: orch_run_status of a run on Citus");
	is(q1("SELECT orch_cancel_run($r)"), 'canceled', "$ta: the run canceled");
}

# sub-workflows are not supported on Citus: a definition with a subflow
# step does not start, and nothing is stored
{
	q1(q{SELECT orch_publish('wf_parent', orch_define('wf_parent', '{"steps": [{"step_id": "s", "type": "subflow", "definition": "wf_saga"}]}'))});
	my $runs = q1("SELECT count(*) FROM orch.runs");
	is(sqlstate_of("SELECT orch_start('wf_parent', '{}', tenant => '$ta')"), '0A000',
		"$ta: a run with a subflow step -> 0A000 on Citus");
	is(q1("SELECT count(*) FROM orch.runs"), $runs, 'no run was stored');
}

# pause, resume, a failed run retried, and an approval rejected, by id
{
	my $r = q1("SELECT orch_start('wf_saga', '{}', tenant => '$tb')");
	is(q1("SELECT orch_pause_run($r)"), 'paused', "$tb: orch_pause_run");
	is(work_step('wq', $tb), '(nothing)', "$tb: a paused run's step task is not handed out");
	is(q1("SELECT orch_resume_run($r)"), 'running', "$tb: orch_resume_run");
	is(work_step('wq', $tb), 'reserve', "$tb: resumed: reserve");
	is(work_step('wq', $tb, cls => 'NON_RETRYABLE'), 'charge', "$tb: charge fails");
	is(work_step('wq_undo', $tb), 'reserve:compensate', "$tb: compensated");
	is(q1("SELECT state FROM orch.runs WHERE id = $r AND tenant_id = '$tb'"), 'failed', "$tb: the saga failed");

	my $o = q1("SELECT orch_start('wf_one', '{}', tenant => '$tb')");
	is(work_step('wq', $tb, cls => 'NON_RETRYABLE'), 'one', "$tb: a run's only step fails");
	my $r2 = q1("SELECT orch_retry_run($o)");
	is(q1("SELECT tenant_id || '/' || state FROM orch.runs WHERE id = $r2"), "$tb/running",
		"$tb: orch_retry_run starts the retry in the run's tenant");
	is(work_step('wq', $tb), 'one', "$tb: the retry runs the step again");
	is(run_st($r2, $tb), 'succeeded: one=succeeded', "$tb: the retry succeeded");

	my $g = q1("SELECT orch_start('wf_full', '{\"items\": []}', tenant => '$ta')");
	is(work_step('wq', $ta, result => '{"size": 1}'), 'fetch', "$ta: fetch (an empty map follows)");
	is(q1("SET ROLE cit_ap; SELECT orch_reject($g, 'gate', 'no-$ta', 'ops', 'not now')"), 'running',
		"$ta: orch_reject as an approver bound to no tenant");
	is(work_step('wq_undo', $ta), 'fetch:compensate', "$ta: the rejection failed the run: fetch is compensated");
	is(run_st($g, $ta),
		'failed: fetch=succeeded+done each=succeeded gate=failed route=skipped big=skipped small=skipped',
		"$ta: the run failed at the rejected approval");
}

# a role bound to one tenant starts and works its runs, and cannot reach
# another tenant's
{
	my $r = q1("SET ROLE cit_rb; SELECT orch_start('wf_saga', '{}')");
	is(q1("SELECT tenant_id FROM orch.runs WHERE id = $r"), $tb, "bound to $tb: orch_start runs in its tenant");
	is(work_step('wq', $tb, role => 'cit_rb'), 'reserve', "bound to $tb: claims and completes its step");
	is(work_step('wq', $tb, role => 'cit_rb'), 'charge', "bound to $tb: the next step");
	is(run_st($r, $tb), 'succeeded: reserve=succeeded+armed charge=succeeded', "bound to $tb: the run succeeded");
	is(sqlstate_of("SET ROLE cit_rb;\nSELECT orch_run_status($run{$ta})"), 'OR005',
		"bound to $tb: orch_run_status of a $ta run -> OR005");
	is(sqlstate_of("SET ROLE cit_rb;\nSELECT orch_cancel_run($run{$ta})"), 'OR005',
		"bound to $tb: orch_cancel_run of a $ta run -> OR005");
	is(q1("SET ROLE cit_rb; SELECT count(*) FROM orch_runs WHERE tenant_id <> '$tb'"), '0',
		"bound to $tb: orch_runs shows its own runs only");
}

# a step's task finished on a worker node (Citus MX) progresses the run there
{
	my $r = q1("SELECT orch_start('wf_saga', '{}', tenant => '$tb')");
	is(work_step('wq', $tb, node => $workers[0]), 'reserve', "$tb: a step completed through a worker node");
	is(work_step('wq', $tb, node => $workers[1]), 'charge', "$tb: the next through the other worker node");
	is(run_st($r, $tb), 'succeeded: reserve=succeeded+armed charge=succeeded', "$tb: the run succeeded");
}

# compensation in reverse completion order: two compensable steps, then a
# failure (the order is counted in the run, whichever node settled a step)
{
	q1(q{SELECT orch_define('wf_two', '{"steps": [
	    {"step_id": "one", "queue": "wq", "handler": "one", "compensation": {"handler": "undo1", "queue": "wq_undo"}},
	    {"step_id": "two", "queue": "wq", "handler": "two", "depends_on": ["one"],
	     "compensation": {"handler": "undo2", "queue": "wq_undo"}},
	    {"step_id": "three", "queue": "wq", "handler": "three", "depends_on": ["two"], "retry_policy": {"max_attempts": 1}}]}')});
	q1(q{SELECT orch_publish('wf_two', 1)});
	my $r = q1("SELECT orch_start('wf_two', '{}', tenant => '$ta')");
	is(join(' ', work_step('wq', $ta), work_step('wq', $ta), work_step('wq', $ta, cls => 'NON_RETRYABLE')),
		'one two three', "$ta: two compensable steps, then a failure");
	is(join(' ', work_step('wq_undo', $ta), work_step('wq_undo', $ta)), 'two:compensate one:compensate',
		"$ta: compensated in reverse completion order");
	is(run_st($r, $ta), 'failed: one=succeeded+done two=succeeded+done three=failed', "$ta: failed, compensated");
}

# maintenance visits a tenant that has runs and no task: its wait ends
{
	q1(q{SELECT orch_define('wf_wait', '{"steps": [{"step_id": "w", "type": "wait", "duration": 1}]}')});
	q1(q{SELECT orch_publish('wf_wait', 1)});
	my $r = q1("SELECT orch_start('wf_wait', '{}', tenant => 'only_runs')");
	is(q1("SELECT count(*) FROM orch.tasks WHERE tenant_id = 'only_runs'"), '0', 'only_runs: a run and no task');
	$coord->poll_query_until('postgres',
		"SELECT wake_at <= now() FROM orch.run_steps WHERE run_id = $r AND tenant_id = 'only_runs'")
	  or die 'gave up waiting for the wait step';
	q1('SELECT * FROM orch_maintain()');
	is(run_st($r, 'only_runs'), 'succeeded: w=succeeded', 'only_runs: orch_maintain ended its wait');
}

# maintenance, tenant by tenant: a run past its deadline fails, its open
# task is cancelled
{
	my $r = q1("SELECT orch_start('wf_late', '{}', tenant => '$tb')");
	$coord->poll_query_until('postgres',
		"SELECT deadline_at <= now() FROM orch.runs WHERE id = $r AND tenant_id = '$tb'")
	  or die 'gave up waiting for the deadline';
	q1('SELECT * FROM orch_maintain()');
	is(q1("SELECT state || '/' || reason_code FROM orch.runs WHERE id = $r AND tenant_id = '$tb'"),
		'failed/deadline_exceeded', "$tb: orch_maintain fails a run past its deadline");
	is(q1("SELECT state FROM orch.tasks WHERE run_id = $r AND tenant_id = '$tb'"), 'cancelled',
		"$tb: its open task is cancelled");
}

is(sqlstate_of('SELECT orch_metrics_refresh()'), '00000', 'orch_metrics_refresh works on Citus');

# ---------------------------------------------------------------------------
# Reading: status, history, the views, the Prometheus text
# ---------------------------------------------------------------------------
{
	my $id = $claimed{$ta}[0][0];
	is(q1("SELECT state FROM orch_status($id)"), 'completed', 'orch_status of a task');
	is(q1("SELECT count(*) >= 4 FROM orch_history($id)"), 't', 'orch_history: its events and attempt');
	for my $view (qw(orch_tasks orch_events orch_attempts orch_queue_stats orch_dead_letters orch_runs
		orch_run_steps))
	{
		my ($rc, $out, $err) = try_sql("SELECT count(*) FROM $view");
		is($rc, 0, "view $view reads on Citus") or diag($err);
	}
	is(q1("SELECT count(*) > 0 FROM orch_tasks WHERE tenant_id = '$ta' AND queue = 'jobs'"), 't',
		'orch_tasks shows the tenant\'s tasks');
	is(q1('SELECT count(*) >= 0 FROM orch_duration_stats()'), 't', 'orch_duration_stats reads');
	like(q1('SELECT orch_metrics_prometheus()'), qr/orch_tasks/, 'orch_metrics_prometheus answers');
}

# ---------------------------------------------------------------------------
# Ids across nodes
# ---------------------------------------------------------------------------
my $wid = $workers[0]->safe_psql('postgres', "SELECT orch_enqueue('jobs', '{\"via\": \"worker\"}', tenant => '$ta')");
my $wgroup = $workers[0]->safe_psql('postgres', 'SELECT groupid FROM pg_dist_local_group');
ok($wid >= ($wgroup << 48) && $wid < (($wgroup + 1) << 48),
	"a task enqueued through a worker takes that worker's id range ($wid)");
is(q1('SELECT count(*) - count(DISTINCT id) FROM orch.tasks'), '0', 'no two tasks share an id');
is(q1('SELECT count(*) - count(DISTINCT id) FROM orch.history'), '0', 'no two events share an id');
ok(q1("SELECT count(*) FROM orch.history WHERE id >= (1::bigint << 48)") > 0,
	'events written by triggers on the workers use the workers\' ranges');

# ---------------------------------------------------------------------------
# Retention purge, tenant by tenant
# ---------------------------------------------------------------------------
wait_until_tasks('every finished task is past the 1 s retention',
	"state IN ('completed', 'failed', 'cancelled')", "finished_at < now() - interval '1 second'");
my $finished = q1("SELECT count(*) FROM orch.tasks WHERE state IN ('completed', 'failed', 'cancelled')");
my $open = q1("SELECT count(*) FROM orch.tasks WHERE state NOT IN ('completed', 'failed', 'cancelled')");
ok($finished >= 26, "finished tasks to purge: $finished");
is(q1("SET orchestrator.retention = '1s'; SELECT count FROM orch_maintain() WHERE action = 'tasks_purged'"),
	$finished, 'orch_maintain purges every finished task of both tenants past the retention');
is(q1("SELECT count(*) FROM orch.tasks"), $open, 'only the unfinished tasks are left');
is(q1("SELECT count(*) FROM orch.attempts a WHERE a.tenant_id IN ('$ta', '$tb')"
		  . " AND NOT EXISTS (SELECT 1 FROM orch.tasks t WHERE t.id = a.task_id AND t.tenant_id = a.tenant_id)"), '0',
	'the attempts went with their tasks');

# ---------------------------------------------------------------------------
# Calls by id go to one shard: the session that claimed a
# task, and a role bound to one tenant, need no lookup across the shards
# ---------------------------------------------------------------------------
# one query in a long-lived session: (stdout, stderr of that query)
sub in_session
{
	my ($s, $sql) = @_;
	$s->{stderr} = '';
	my $out = $s->query($sql);
	return ($out, $s->{stderr});
}
sub multi_count { my $n = () = $_[0] =~ /multi-task query about to be executed/g; return $n; }

q1(q{SELECT orch_create_queue('route', '{"lease": "10 minutes"}')});
for my $t ($ta, $tb)
{
	q1("SELECT orch_enqueue('route', jsonb_build_object('n', g), tenant => '$t') FROM generate_series(1, 6) g");
}
q1("CREATE ROLE cit_rm LOGIN; GRANT orch_reader, orch_worker, orch_producer TO cit_rm");
q1("SELECT orch_bind_tenant('cit_rm', '$tb'); SELECT orch_bind_tenant('cit_rm', 'zeta')");
my $sess = $coord->background_psql('postgres', on_error_stop => 0);
in_session($sess, "\\set VERBOSITY verbose\nSET citus.multi_task_query_log_level = 'error'");
for my $t ($ta, $tb)
{
	# the session claims (it learns the tasks' tenant), then finishes them
	my ($out, $err) = in_session($sess,
		"SELECT task_id || ':' || lease_token FROM orch_dequeue('route', 'w', 5, tenant => '$t')");
	is($err, '', "$t: same session, the claim runs no multi-shard statement") or diag($err);
	my @c = map { [ split /:/ ] } split /\n/, $out;
	is(scalar @c, 5, "$t: same session, five tasks claimed");
	($out, $err) = in_session($sess, "SELECT orch_complete($c[0][0], '$c[0][1]')");
	is("$out$err", 'completed', "$t: same session, orch_complete runs no multi-shard statement");
	($out, $err) = in_session($sess, "SELECT orch_heartbeat($c[1][0], '$c[1][1]')");
	is("$out$err", 'executing', "$t: same session, orch_heartbeat runs no multi-shard statement");
	($out, $err) = in_session($sess,
		"SELECT state || '/' || reason_code FROM orch_fail($c[1][0], '$c[1][1]', 'NON_RETRYABLE', 'bad')");
	is("$out$err", 'failed/non_retryable', "$t: same session, orch_fail runs no multi-shard statement");
	($out, $err) = in_session($sess,
		"SELECT state FROM orch_fail($c[2][0], '$c[2][1]', 'TRANSIENT', 'flaky')");
	is("$out$err", 'awaiting_tool', "$t: same session, orch_fail to a retry runs no multi-shard statement");
	($out, $err) = in_session($sess,
		"SELECT orch_complete_batch(ARRAY[$c[3][0], $c[4][0]]::bigint[], ARRAY['$c[3][1]', '$c[4][1]']::uuid[])");
	is("$out$err", '2', "$t: same session, orch_complete_batch runs no multi-shard statement");
	($out, $err) = in_session($sess, "SELECT orch_complete($c[0][0], '$c[0][1]')");
	like($err, qr/ERROR:\s+OR002/, "$t: same session, a completed task is terminal -> OR002 (single-shard)");
}
{
	# an enqueue teaches the session too; commands likewise
	my ($out, $err) = in_session($sess, "SELECT orch_enqueue('route', '{}', tenant => '$ta')");
	my $eid = $out;
	($out, $err) = in_session($sess, "SELECT orch_cancel($eid, 'enqueued here')");
	is("$out$err", 'cancelled', 'same session, orch_cancel of a task it enqueued runs no multi-shard statement');
	($out, $err) = in_session($sess, "SELECT command_id FROM orch_command('email', 'route-1', '{}', tenant => '$tb')");
	my $cmd = $out;
	($out, $err) = in_session($sess, "SELECT orch_command_result($cmd, true)");
	is("$out$err", 'succeeded', 'same session, orch_command_result runs no multi-shard statement');
}

# a role bound to one tenant: no lookup, even in a fresh session
{
	my ($rc, $out, $err) = try_sql("SET ROLE cit_rb; SET citus.multi_task_query_log_level = 'error';\n"
		  . "SELECT task_id || ':' || lease_token FROM orch_dequeue('route', 'w-rb', 1)");
	is($rc, 0, "bound to $tb: a claim naming no tenant (its own) runs no multi-shard statement") or diag($err);
	my ($id, $tok) = split /:/, $out;
	($rc, $out, $err) = try_sql("SET ROLE cit_rb; SET citus.multi_task_query_log_level = 'error';\n"
		  . "SELECT orch_heartbeat($id, '$tok'); SELECT orch_complete($id, '$tok')");
	is("$out$err", "executing\ncompleted",
		"bound to $tb: in a fresh session, orch_heartbeat and orch_complete run no multi-shard statement");
	# a fresh unbound session still finds it (by the lookup)
	is(sqlstate_of("SELECT orch_complete($id, '$tok')"), 'OR002',
		'a fresh unbound session looks the task up (OR002: completed)');
}

# the remembered tenant is a hint: SET ROLE to a role bound elsewhere sees nothing
{
	my ($out, $err) = in_session($sess,
		"SELECT task_id || ':' || lease_token FROM orch_dequeue('route', 'w', 1, tenant => '$ta')");
	my ($id, $tok) = split /:/, $out;
	($out, $err) = in_session($sess, "SET ROLE cit_rb; SELECT orch_complete($id, '$tok')");
	like($err, qr/ERROR:\s+OR005/, "same session, SET ROLE to a role bound to $tb: the $ta task it claimed -> OR005");
	in_session($sess, 'RESET ROLE');
	($out, $err) = in_session($sess,
		"SET ROLE cit_rm; SET citus.multi_task_query_log_level = 'notice'; SELECT orch_heartbeat($id, '$tok')");
	like($err, qr/ERROR:\s+OR005/,
		"same session, SET ROLE to a role bound to $tb and zeta: the $ta task it claimed -> OR005");
	is(multi_count($err), 1, '... after a lookup in its own tenants (the remembered tenant is not one)');
	in_session($sess, "RESET ROLE; SET citus.multi_task_query_log_level = 'error'");
	is(q1("SELECT state FROM orch.tasks WHERE id = $id"), 'executing', 'the refused calls changed nothing');
	($out, $err) = in_session($sess, "SELECT orch_complete($id, '$tok')");
	is("$out$err", 'completed', 'back as the claiming role, orch_complete runs no multi-shard statement');

	# a remembered task purged by retention: OR005 after one lookup
	wait_until_tasks('the routed task is past the 1 s retention', "id = $id", "finished_at < now() - interval '1 second'");
	cmp_ok(q1("SET orchestrator.retention = '1s'; SELECT count FROM orch_maintain() WHERE action = 'tasks_purged'"),
		'>=', 1, 'the task is purged');
	is(q1("SELECT count(*) FROM orch.tasks WHERE id = $id"), '0', 'the task is gone');
	($out, $err) = in_session($sess,
		"SET citus.multi_task_query_log_level = 'notice'; SELECT orch_heartbeat($id, '$tok')");
	like($err, qr/ERROR:\s+OR005/, 'same session, orch_heartbeat of the purged task it remembered -> OR005');
	is(multi_count($err), 1, '... after one lookup across the shards');
	($out, $err) = in_session($sess, "SELECT orch_complete($id, '$tok')");
	like($err, qr/ERROR:\s+OR005/, 'and orch_complete of it -> OR005');
	in_session($sess, "SET citus.multi_task_query_log_level = 'error'");
}

# one worker down: the other tenant's work goes on
{
	my ($down) = grep {
		$_->safe_psql('postgres', 'SELECT groupid FROM pg_dist_local_group') eq $node_of{$ta}
	} @workers;
	q1("SELECT orch_enqueue('route', jsonb_build_object('n', g), tenant => '$tb') FROM generate_series(1, 3) g");
	q1("SELECT orch_enqueue('mq', '{}', tenant => '$_')") for ($ta, $tb);
	my $as_of = q1('SELECT refreshed_at FROM orch.metric_state');
	$down->stop;
	my ($frc, $fout, $ferr) = try_sql('SELECT orch_metrics_refresh()');
	is($frc, 0, "with the worker of $ta stopped, orch_metrics_refresh folds what it can") or diag($ferr);
	like($ferr, qr/WARNING:.*shards of orch\.tasks were not folded/, '... and warns of the shards it could not reach');
	is($mtotal->($tb, 'enqueued'), '5', "... ${tb}'s new task is counted (${ta}'s counters are on the stopped worker)");
	is(q1('SELECT refreshed_at FROM orch.metric_state'), $as_of,
		'... and metrics_as_of stays at the last fold that reached every shard');
	my ($out, $err) = in_session($sess,
		"SELECT task_id || ':' || lease_token FROM orch_dequeue('route', 'w', 1, tenant => '$tb')");
	is($err, '', "with the worker of $ta stopped, a claim of $tb works") or diag($err);
	my ($id, $tok) = split /:/, $out;
	($out, $err) = in_session($sess, "SELECT orch_complete($id, '$tok')");
	is("$out$err", 'completed', "with the worker of $ta stopped, the same session completes the $tb task");
	my ($rc, $out2, $err2) = try_sql("SET ROLE cit_rb;\n"
		  . "SELECT task_id || ':' || lease_token FROM orch_dequeue('route', 'w-rb', 1)");
	is($rc, 0, "with the worker of $ta stopped, a role bound to $tb claims") or diag($err2);
	my ($id2, $tok2) = split /:/, $out2;
	($rc, $out2, $err2) = try_sql("SET ROLE cit_rb;\nSELECT orch_complete($id2, '$tok2')");
	is($out2, 'completed', "... and completes in a fresh session") or diag($err2);
	($rc, $out2, $err2) = try_sql("SELECT task_id || ':' || lease_token FROM orch_dequeue('route', 'w', 1, tenant => '$tb')");
	my ($id3, $tok3) = split /:/, $out2;
	($rc, $out2, $err2) = try_sql("SELECT orch_complete($id3, '$tok3')");
	isnt($rc, 0, "... while a fresh unbound session's orch_complete fails (its lookup needs every shard)");
	$down->start;
	$sess->quit;
	q1('SELECT orch_metrics_refresh()');
	is($mtotal->($tb, 'enqueued') . ' ' . $mtotal->($ta, 'enqueued'), '5 5',
		"the worker of $ta back: its task is counted by the next fold, and ${tb}'s not again");
	isnt(q1('SELECT refreshed_at FROM orch.metric_state'), $as_of, '... and metrics_as_of moves on');
	($rc, $out2, $err2) = try_sql("SELECT orch_complete($id3, '$tok3')");
	is($out2, 'completed', "the worker of $ta back: the fresh session's orch_complete works") or diag($err2);
	q1("SELECT orch_enqueue('route', '{}', tenant => '$ta')");
	($rc, $out2, $err2) = try_sql("SELECT task_id || ':' || lease_token FROM orch_dequeue('route', 'w', 1, tenant => '$ta')");
	my ($id4, $tok4) = split /:/, $out2;
	is(q1("SELECT orch_complete($id4, '$tok4')"), 'completed', "and $ta works again");
}

# ---------------------------------------------------------------------------
# A worker stopped under load: a session per tenant claims
# and completes in a loop (claim and completion in transactions of their
# own, as a worker does); the worker of one tenant is stopped while both
# are working.  The other tenant's work goes on: tasks enqueued during the
# outage are all done before it ends.  Once the worker is back, its leases
# are recovered and everything finishes: every task completed exactly once,
# none lost.  Paced by state: the fault lands once both have work done and
# work left; the outage lasts until the other tenant has finished.
# ---------------------------------------------------------------------------
{
	my ($down) = grep {
		$_->safe_psql('postgres', 'SELECT groupid FROM pg_dist_local_group') eq $node_of{$ta}
	} @workers;
	q1(q{SELECT orch_create_queue('load', '{"lease": "3 s", "max_attempts": 10,
	                                        "initial_delay": "1 s", "max_delay": "1 s"}')});
	q1("CREATE TABLE public.cit_load_ctl (tenant text PRIMARY KEY, stop boolean NOT NULL DEFAULT false);"
		  . " INSERT INTO public.cit_load_ctl VALUES ('$ta'), ('$tb')");
	q1(<<'EOSQL');
CREATE PROCEDURE public.cit_load(t text, w text) LANGUAGE plpgsql AS $p$
DECLARE
    r record;
BEGIN
    LOOP
        SELECT d.task_id, d.lease_token INTO r FROM orch_dequeue('load', w, 1, tenant => t) d;
        COMMIT;
        IF r.task_id IS NOT NULL THEN
            PERFORM orch_complete(r.task_id, r.lease_token);
            COMMIT;
        ELSE
            EXIT WHEN (SELECT c.stop FROM public.cit_load_ctl c WHERE c.tenant = t)
                  AND NOT EXISTS (SELECT 1 FROM orch.tasks x WHERE x.tenant_id = t AND x.queue = 'load'
                                     AND x.state <> 'completed');
            PERFORM pg_sleep(0.02);
        END IF;
    END LOOP;
END
$p$
EOSQL
	for my $t ($ta, $tb)
	{
		q1("SELECT count(orch_enqueue('load', jsonb_build_object('n', g), tenant => '$t')) FROM generate_series(1, 400) g");
	}
	my $count = sub {
		my ($t, $cond) = @_;
		return q1("SELECT count(*) FROM orch.tasks WHERE tenant_id = '$t' AND queue = 'load' AND $cond");
	};
	my %ls = map { $_ => $coord->background_psql('postgres', on_error_stop => 0) } ($ta, $tb);
	$ls{$_}->query_until(qr/started/, "\\echo started\nCALL public.cit_load('$_', 'w-$_');\n") for ($ta, $tb);
	for my $t ($ta, $tb)
	{
		$coord->poll_query_until('postgres', "SELECT count(*) >= 20 FROM orch.tasks"
			  . " WHERE tenant_id = '$t' AND queue = 'load' AND state = 'completed'")
		  or die "gave up waiting for $t to work";
	}
	cmp_ok($count->($ta, "state <> 'completed'"), '>', 0, "${ta} has work left when its worker stops");
	$down->stop;
	my $b_at_stop = $count->($tb, "state = 'completed'");
	q1("SELECT count(orch_enqueue('load', jsonb_build_object('n', g), tenant => '$tb')) FROM generate_series(401, 450) g");
	$coord->poll_query_until('postgres', "SELECT count(*) = 0 FROM orch.tasks"
		  . " WHERE tenant_id = '$tb' AND queue = 'load' AND state <> 'completed'")
	  or die "gave up waiting for $tb to finish during the outage";
	cmp_ok($count->($tb, "state = 'completed'") - $b_at_stop, '>=', 50,
		"the worker of $ta stopped under load: ${tb}'s work goes on (the tasks enqueued during the outage are done)");
	is($count->($tb, "state = 'completed'"), '450', "... ${tb} has finished all its 450 tasks while the worker is down");
	$down->start;
	# the tenant's session lost its worker mid-loop: its call failed with an
	# ERROR, or its connection ended (Citus passes on the worker's shutdown
	# as FATAL when it lands mid-statement), so a new session takes over, as
	# a worker process reconnects; the leases run out and are recovered (as
	# after any worker crash), then it works again
	eval { $ls{$ta}->quit; };
	$ls{$ta} = $coord->background_psql('postgres', on_error_stop => 0);
	q1("UPDATE public.cit_load_ctl SET stop = true");
	# (orch_maintain as a statement of its own, every 0.2 s until none is
	# left, within the TAP timeout)
	for (my $i = 0;; $i++)
	{
		q1('SELECT count(*) FROM orch_maintain()');
		last if $count->($ta, "state = 'executing'") eq '0';
		die "gave up waiting for ${ta}'s leases to be recovered" if $i > 5 * $PostgreSQL::Test::Utils::timeout_default;
		select(undef, undef, undef, 0.2);
	}
	$ls{$ta}->{stderr} = '';
	$ls{$ta}->query("CALL public.cit_load('$ta', 'w-$ta')");
	is($ls{$ta}->{stderr}, '', "${ta} works again once its worker is back");
	$ls{$tb}->query('SELECT 1');
	$_->quit for values %ls;
	is($count->($ta, "state = 'completed'") . ' ' . $count->($tb, "state = 'completed'"), '400 450',
		'every task of both tenants is completed (none lost)');
	is(q1(q{SELECT count(*) FROM (SELECT a.task_id FROM orch.attempt_history a
	          JOIN orch.tasks t ON t.id = a.task_id AND t.tenant_id = a.tenant_id
	         WHERE t.queue = 'load' AND a.outcome = 'completed'
	         GROUP BY a.task_id, a.tenant_id HAVING count(*) = 1) s}), '850',
		'each was completed exactly once (one completed attempt each, none twice)');
}

# ---------------------------------------------------------------------------
# The rest of the API on Citus, so that "What works on Citus" lists it all:
# queue settings, pause and resume, a concurrency limit, the retry decision,
# orch_reprocess, definitions (validate, read, deprecate), a workflow's drift
# probes (run on the worker at the gate) and orch_acknowledge_drift, tenant
# bindings, a state machine on a table of the user's, and the pg_cron
# schedule (when pg_cron is installed)
# ---------------------------------------------------------------------------
{
	q1(q{SELECT orch_create_queue('sw', '{"initial_delay": "1 s", "max_delay": "1 s"}')});
	is(q1(q{SELECT orch_configure_queue('sw', '{"max_attempts": 3}') ->> 'max_attempts'}), '3', 'orch_configure_queue');
	is($workers[0]->safe_psql('postgres', q{SELECT orch_queue_settings('sw') ->> 'max_attempts'}), '3',
		'orch_queue_settings on a worker node reads the new setting');
	q1("SELECT orch_enqueue('sw', '{}', tenant => '$ta')");
	q1(q{SELECT orch_pause_queue('sw')});
	is(q1("SELECT count(*) FROM orch_dequeue('sw', 'w', 1, tenant => '$ta')"), '0', 'orch_pause_queue: nothing is claimed');
	q1(q{SELECT orch_resume_queue('sw')});
	my ($id, $tok) = split /\|/, q1("SELECT task_id || '|' || lease_token FROM orch_dequeue('sw', 'w', 1, tenant => '$ta')");
	ok(defined $tok, 'orch_resume_queue: claimed again');
	is(q1("SELECT reason_code FROM orch_fail($id, '$tok', 'NON_RETRYABLE', 'bad')"), 'non_retryable', 'a dead letter');
	is(q1(q{SELECT count(*) FROM orch_reprocess(queue => 'sw', reason_code => 'non_retryable')}), '1',
		'orch_reprocess re-drives it');
	is(q1("SELECT count(*) FROM orch.tasks WHERE tenant_id = '$ta' AND queue = 'sw' AND state = 'queued'"), '1',
		'... as a new task in its tenant');
	q1(q{SELECT orch_set_concurrency_limit('sw', 'k1', 2)});
	is(q1(q{SELECT max_running FROM orch.concurrency_limits WHERE queue = 'sw' AND key = 'k1'}), '2',
		'orch_set_concurrency_limit');
	is(q1(q{SELECT decision || ' ' || reason_code FROM orch_retry_decision('TRANSIENT', 1, 1)}), 'retry retry_scheduled',
		'orch_retry_decision');

	# definitions
	is(sqlstate_of(q{SELECT orch_validate_definition('{"steps": [{"step_id": "a", "queue": "sw", "handler": "h"}]}')}),
		'00000', 'orch_validate_definition accepts a valid spec');
	is(sqlstate_of(q{SELECT orch_validate_definition('{"steps": []}')}), 'OR008', '... and refuses an empty one (OR008)');
	q1(q{SELECT orch_define('sw_def', '{"steps": [{"step_id": "a", "queue": "sw", "handler": "h"}]}')});
	q1(q{SELECT orch_publish('sw_def', 1)});
	is(q1(q{SELECT status FROM orch_definition('sw_def')}), 'published', 'orch_definition');
	q1(q{SELECT orch_deprecate('sw_def', 1)});
	is(q1(q{SELECT status FROM orch_definition('sw_def', 1)}), 'deprecated', 'orch_deprecate');

	# drift probes: a function of the user's over a reference table, run as
	# the publisher where the run progresses (the worker, at the gate)
	q1(q{CREATE TABLE public.knobs (v int NOT NULL); SELECT create_reference_table('public.knobs');
	     INSERT INTO public.knobs VALUES (1);
	     CREATE FUNCTION public.knob() RETURNS int LANGUAGE sql STABLE AS 'SELECT v FROM public.knobs'});
	q1(q{SELECT orch_define('sw_drift', '{"probes": {"k": "public.knob()"}, "steps": [
	       {"step_id": "prep", "queue": "sw", "handler": "prep"},
	       {"step_id": "gate", "type": "human_approval", "depends_on": ["prep"]}]}')});
	q1(q{SELECT orch_publish('sw_drift', 1)});
	my $run = q1("SELECT orch_start('sw_drift', '{}', tenant => '$tb')");
	q1(q{UPDATE public.knobs SET v = 2});
	is(q1("SELECT count(orch_complete(task_id, lease_token)) FROM orch_dequeue('sw', 'w', 1, tenant => '$tb')"), '1',
		"$tb: the run's first step completed");
	is(q1("SELECT state || ' ' || reason_code FROM orch_runs WHERE run_id = $run"), 'paused drift_detected',
		'the probe changed before the gate: the run stops on drift (probe run on the worker)');
	is(q1("SELECT orch_acknowledge_drift($run, 'sw-ack-1', 'alice', 'knob turned')"), 'paused',
		'orch_acknowledge_drift re-pins it');
	q1("SELECT orch_resume_run($run)");
	is(q1("SELECT orch_approve($run, 'gate', 'sw-gate-1')"), 'succeeded', 'then the gate is approved and the run succeeds');

	# tenant bindings
	is(q1("SET ROLE cit_rm; SELECT string_agg(t, ',' ORDER BY t) FROM unnest(orch_caller_tenants()) t"), "$tb,zeta",
		'orch_caller_tenants');
	is(q1("SELECT orch_unbind_tenant('cit_rm', 'zeta')"), 't', 'orch_unbind_tenant');
	is(q1("SET ROLE cit_rm; SELECT string_agg(t, ',' ORDER BY t) FROM unnest(orch_caller_tenants()) t"), $tb,
		'... the binding is gone');

	# a state machine on a (local) table of the user's: its events go to the
	# distributed history, under tenant default
	q1(q{CREATE TABLE public.articles (id int PRIMARY KEY, status text NOT NULL)});
	q1(q{SELECT orch_create_state_machine('article', '{"draft": ["published"], "published": []}', '{draft}')});
	q1(q{SELECT orch_attach_state_machine('public.articles', 'status', 'article')});
	q1(q{INSERT INTO public.articles VALUES (1, 'draft'); UPDATE public.articles SET status = 'published' WHERE id = 1});
	is(sqlstate_of(q{UPDATE public.articles SET status = 'draft' WHERE id = 1}), 'OR002',
		'a state machine on a table of the user\'s: a change from a terminal state -> OR002');
	is(sqlstate_of(q{INSERT INTO public.articles VALUES (2, 'published')}), 'OR001', '... a start outside initial -> OR001');
	is(q1(q{SELECT string_agg(coalesce(from_state, '-') || '>' || to_state, ',' ORDER BY event_id)
	          FROM orch_events WHERE entity = 'public.articles'}), '->draft,draft>published',
		'... and its events are in the history');

	# the pg_cron schedule, on the coordinator
	SKIP:
	{
		skip 'pg_cron is not installed for this server', 2 unless $have_cron;
		like(q1('SELECT orch_schedule_maintenance()'), qr/^\d+$/, 'orch_schedule_maintenance on the coordinator');
		is(q1('SELECT orch_unschedule_maintenance()'), 't', 'orch_unschedule_maintenance');
	}
}

# ---------------------------------------------------------------------------
# Runs retired with their partition of run ids: a finished run
# past the retention goes with its steps and its idempotency key (its range
# compacted through the shards, the lifecycle trigger off for the rows put
# back); an open run of the same range stays as it was, with no event added
# ---------------------------------------------------------------------------
{
	my $done = q1("SELECT orch_start('wf', '{}', idempotency_key => 'cit-ret', tenant => '$ta')");
	my $open = q1("SELECT orch_start('wf', '{}', tenant => '$tb')");
	is(q1("SELECT orch_cancel_run($done, 'retire me')"), 'canceled', 'retirement: a finished run and an open one');
	my $open_before = run_st($open, $tb);
	my $open_events = q1("SELECT count(*) FROM orch.events WHERE run_id = $open AND task_id IS NULL");
	$coord->poll_query_until('postgres',
		"SELECT bool_and(coalesce(finished_at, created_at) < now() - interval '1 second')"
		  . " FROM orch.runs WHERE id IN ($done, $open)")
	  or die 'gave up waiting for the runs to age past 1 s';
	cmp_ok(q1("SET orchestrator.retention = '1s'; SELECT count FROM orch_maintain() WHERE action = 'runs_purged'"),
		'>=', 1, 'retirement: orch_maintain retires the finished run on Citus');
	is(q1("SELECT (SELECT count(*) FROM orch.runs WHERE id = $done) || ' ' ||"
		  . " (SELECT count(*) FROM orch.run_steps WHERE run_id = $done) || ' ' ||"
		  . " (SELECT count(*) FROM orch.run_keys WHERE run_id = $done)"), '0 0 0',
		'retirement: the finished run is gone with its steps and its key');
	is(run_st($open, $tb), $open_before, 'retirement: the open run of the same range stays as it was');
	is(q1("SELECT count(*) FROM orch.events WHERE run_id = $open AND task_id IS NULL"), $open_events,
		'retirement: ... and no event was written for it');
	isnt(q1("SELECT orch_start('wf', '{}', idempotency_key => 'cit-ret', tenant => '$ta')"), $done,
		'retirement: the key is free again: it starts a new run');
	q1("SELECT orch_cancel_run($open, 'done')");
}

# ---------------------------------------------------------------------------
# A worker added later: orch_distribute again gives it its id range
# ---------------------------------------------------------------------------
my $w3 = PostgreSQL::Test::Cluster->new('worker3');
$w3->init;
$w3->append_conf('postgresql.conf', "shared_preload_libraries = 'citus'\nmax_connections = 60\n");
$w3->start;
$w3->safe_psql('postgres', 'CREATE EXTENSION citus');
q1(sprintf("SELECT citus_add_node('%s', %d)", $w3->host, $w3->port));
is($w3->safe_psql('postgres', "SELECT extversion FROM pg_extension WHERE extname = 'orchestrator'"),
	q1("SELECT extversion FROM pg_extension WHERE extname = 'orchestrator'"),
	'citus_add_node created the extension on the new worker');
q1('SELECT count(*) FROM orch_distribute()');
my $g3 = $w3->safe_psql('postgres', 'SELECT groupid FROM pg_dist_local_group');
my $id3 = $w3->safe_psql('postgres', "SELECT orch_enqueue('jobs', '{\"via\": \"worker3\"}', tenant => '$tb')");
ok($id3 >= ($g3 << 48) && $id3 < (($g3 + 1) << 48),
	"after orch_distribute again, the new worker takes ids from its own range ($id3)");
is(q1('SELECT count(*) - count(DISTINCT id) FROM orch.tasks'), '0', 'still no two tasks share an id');
push @workers, $w3;

# ---------------------------------------------------------------------------
# A distributed 0.7.0 installation updated to 0.8.0 with the shipped script
# (docs/citus-upgrade-0.7.0-0.8.0.sql): every row kept, leases and keys
# still honoured, ids never reused, distributed again
# ---------------------------------------------------------------------------
{
	my @uw = @workers[0 .. 1];
	my $script = dirname(__FILE__) . '/../docs/citus-upgrade-0.7.0-0.8.0.sql';
	$coord->safe_psql('postgres', 'CREATE DATABASE upg');
	for my $w (@uw)
	{
		$w->safe_psql('postgres', 'CREATE DATABASE upg');
		$w->safe_psql('upg', 'CREATE EXTENSION citus');
	}
	my $u = sub { return $coord->safe_psql('upg', $_[0]); };
	$u->('CREATE EXTENSION citus');
	$u->(sprintf("SELECT citus_set_coordinator_host('%s', %d)", $coord->host, $coord->port));
	$u->(sprintf("SELECT citus_add_node('%s', %d)", $_->host, $_->port)) for @uw;
	$u->(q{CREATE EXTENSION orchestrator VERSION '0.7.0'});
	$u->('SELECT count(*) FROM orch_distribute(4)');
	$u->(q{SELECT orch_create_queue('q', '{"initial_delay": "1 h"}')});
	$u->(q{SELECT count(orch_enqueue('q', jsonb_build_object('i', g), idempotency_key => 'k' || g,
	                                  tenant => 'u' || (g % 3))) FROM generate_series(1, 30) g});
	# a task enqueued through a worker: an id of that worker's range
	my $wid = $uw[0]->safe_psql('upg', q{SELECT orch_enqueue('q', '{"via": "worker"}', tenant => 'u1')});
	$u->(q{SELECT count(orch_complete(task_id, lease_token)) FROM orch_dequeue('q', 'w', 3, tenant => 'u1')});
	$u->(q{SELECT count(f.state) FROM orch_dequeue('q', 'w', 2, tenant => 'u0') d,
	         LATERAL orch_fail(d.task_id, d.lease_token, 'TRANSIENT', 'boom') f});
	$u->(q{SELECT count(f.state) FROM orch_dequeue('q', 'w', 1, tenant => 'u2') d,
	         LATERAL orch_fail(d.task_id, d.lease_token, 'NON_RETRYABLE', 'bad') f});
	my ($held_id, $held_tok) = split /\|/,
	  $u->(q{SELECT task_id || '|' || lease_token FROM orch_dequeue('q', 'w', 1, lease => '1 hour', tenant => 'u2')});
	my $k5 = $u->(q{SELECT id FROM orch.tasks WHERE idempotency_key = 'k5'});
	my %digest_sql = (
		tasks => q{SELECT md5(string_agg(concat_ws('/', id, tenant_id, state, attempts, failures, lease_token,
		              payload, idempotency_key, run_at, lease_expires_at), ',' ORDER BY id)) FROM orch.tasks},
		events => q{SELECT md5(string_agg(concat_ws('/', id, tenant_id, task_id, from_state, to_state, reason_code,
		               attempt, at), ',' ORDER BY id)) FROM orch.events},
		attempts => q{SELECT md5(string_agg(concat_ws('/', id, tenant_id, task_id, attempt, outcome, error_class,
		                 finished_at), ',' ORDER BY id)) FROM orch.attempts},
		keys => q{SELECT md5(string_agg(concat_ws('/', tenant_id, key, task_id), ',' ORDER BY tenant_id, key))
		           FROM orch.idempotency_keys});
	my %before = map { $_ => $u->($digest_sql{$_}) } keys %digest_sql;

	# an object of the user's that depends on the extension: the script
	# stops in its first transaction, names it, and changes nothing
	$u->('CREATE VIEW public.my_tasks AS SELECT task_id FROM orch_tasks');
	my ($rc, $out, $err) = $coord->psql('upg', '', extra_params => ['-v', 'ON_ERROR_STOP=1', '-f', $script]);
	isnt($rc, 0, 'the update script stops when an object of the user depends on the extension');
	like($err, qr/objects of your own depend on the orchestrator: rule _RETURN on view my_tasks/,
		'... and names it');
	is($u->(q{SELECT extversion || ' ' || (SELECT count(*) FROM pg_namespace WHERE nspname = 'orch_upgrade')
	           FROM pg_extension WHERE extname = 'orchestrator'}), '0.7.0 0', '... having changed nothing');
	$u->('DROP VIEW public.my_tasks');

	($rc, $out, $err) = $coord->psql('upg', '', extra_params => ['-v', 'ON_ERROR_STOP=1', '-f', $script]);
	is($rc, 0, 'the update script runs') or diag($err);
	is($u->(q{SELECT extversion FROM pg_extension WHERE extname = 'orchestrator'}), '0.8.0', 'the installation is at 0.8.0');
	is($u->(q{SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'orch.tasks'::regclass}), '4',
		'orch.tasks is distributed again, with its 4 shards');
	is($u->(q{SELECT count(*) FROM pg_namespace WHERE nspname = 'orch_upgrade'}), '0', 'the copy of the rows is gone');
	is($u->($digest_sql{$_}), $before{$_}, "every row of $_ as it was") for sort keys %digest_sql;
	is($u->("SELECT orch_complete($held_id, '$held_tok')"), 'completed',
		'a task claimed before the update completes with its lease token');
	is($u->(q{SELECT orch_enqueue('q', '{"i": 5}', idempotency_key => 'k5', tenant => 'u2')}), $k5,
		'an idempotency key from before the update replays its task');
	my $wid2 = $uw[0]->safe_psql('upg', q{SELECT orch_enqueue('q', '{"via": "worker"}', tenant => 'u1')});
	ok($wid2 > $wid && ($wid2 >> 48) == ($wid >> 48),
		"the worker goes on in its id range past the ids stored ($wid2 > $wid)");
	$u->(q{SELECT count(orch_enqueue('q', '{}', tenant => 'u' || g)) FROM generate_series(0, 2) g});
	$u->(q{SELECT count(orch_complete(task_id, lease_token)) FROM orch_dequeue('q', 'w', 2, tenant => 'u0')});
	is($u->(q{SELECT (SELECT count(*) - count(DISTINCT id) FROM orch.tasks)
	               + (SELECT count(*) - count(DISTINCT id) FROM orch.events)
	               + (SELECT count(*) - count(DISTINCT id) FROM orch.attempts)}), '0',
		'no two tasks, events or attempts share an id');
	$u->('SELECT orch_metrics_refresh()');
	is($u->(q{SELECT string_agg(tenant_id || ':' || metric || '=' || value, ',' ORDER BY tenant_id, metric)
	           FROM orch.metric_totals WHERE queue = 'q' AND metric IN ('enqueued', 'started')}),
		'u0:enqueued=1,u0:started=2,u1:enqueued=2,u2:enqueued=1',
		'the counters count from the update on (0.7.0 folded none on Citus)');
}

# ---------------------------------------------------------------------------
# Citus installed, tables not distributed: everything as on a single node
# ---------------------------------------------------------------------------
$coord->safe_psql('postgres', 'CREATE DATABASE plain');
$coord->safe_psql('plain', 'CREATE EXTENSION citus; CREATE EXTENSION orchestrator');
is($coord->safe_psql('plain', q{
	SELECT orch_define('wf', '{"steps": [{"step_id": "a", "queue": "wq", "handler": "a"}]}');
	SELECT orch_publish('wf', 1);
	SELECT orch_start('wf', '{}') > 0;
	SELECT count(orch_complete(d.task_id, d.lease_token)) FROM orch_dequeue('wq', 'w') d;
	SELECT state FROM orch_runs;}),
	"1\n" . $coord->safe_psql('plain', q{SELECT content_hash FROM orch.definitions}) . "\nt\n1\nsucceeded",
	'with Citus installed but the tables local, a workflow runs and a claim needs no tenant');

$_->stop for reverse(@workers), $coord;
done_testing();
