# t/013_pg_cron.pl: maintenance scheduled with pg_cron recovers an abandoned
# lease by itself.
#
# A node with shared_preload_libraries = 'pg_cron' and cron.database_name =
# 'postgres' (cron.host = the node's socket directory, so that pg_cron's
# libpq connections reach it).  CREATE EXTENSION pg_cron and orchestrator;
# orch_schedule_maintenance() returns the id of a job in cron.job (schedule
# '* * * * *', command orch_maintain(1000), database postgres); calling it again
# re-registers the same job instead of adding one.  A task claimed with a
# 1-second lease and abandoned is then recovered by one real scheduled run
# (pg_cron 1.4 runs jobs at minute boundaries: we wait up to 90 s, polling
# cron.job_run_details and the task; nothing calls orch_dequeue or
# orch_maintain meanwhile): the task goes to retry-wait with reason
# lease_expired, its attempt is recorded as lease_expired / TRANSIENT, and
# the recovery event falls inside a succeeded run of the job.
# orch_unschedule_maintenance() removes the job (true, then false).
# In a database without pg_cron installed, orch_schedule_maintenance() and
# orch_unschedule_maintenance() raise 55000 and orch_maintain() still works.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);
use FaultHarness qw(query sqlstate_of wait_for);

my $node = PostgreSQL::Test::Cluster->new('pg_cron');
$node->init;
my $sock = $node->host;
$node->append_conf('postgresql.conf', <<EOC);
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
cron.host = '$sock'
log_statement = none
EOC
$node->start;

sub sql { return query($node, 'postgres', $_[0]); }

sql('CREATE EXTENSION pg_cron');
sql('CREATE EXTENSION orchestrator');

# --- registration ----------------------------------------------------------
my $job = sql('SELECT orch_schedule_maintenance()');
like($job, qr/^\d+$/, 'orch_schedule_maintenance() returns a job id');
is( sql(qq{SELECT schedule || ' | ' || database || ' | ' || (command LIKE '%orch_maintain(1000)%') || ' | ' || active
             FROM cron.job WHERE jobid = $job}),
	'* * * * * | postgres | true | true',
	'the job is in cron.job: every minute, orch_maintain() in database postgres, active');
is(sql('SELECT orch_schedule_maintenance()'), $job, 'scheduling again returns the same job');
is(sql(q{SELECT count(*) FROM cron.job WHERE command LIKE '%orch_maintain%'}),
	'1', 'and leaves one maintenance job');

# --- an abandoned lease ----------------------------------------------------
sql(q{SELECT orch_create_queue('cron', '{"initial_delay": "1 hour"}')});
my $id = sql(q{SELECT orch_enqueue('cron', '{"job": "abandoned"}')});

# Claim right after a minute boundary has passed, so that the lease is over
# well before the next run (and the wait below is about one minute).
wait_for(10, sub { sql(q{SELECT extract(second FROM clock_timestamp()) BETWEEN 1 AND 50}) eq 't' });
my ($task, $token) = split /\|/,
  sql(q{SELECT task_id, lease_token FROM orch_dequeue('cron', 'gone-worker', 1, '1 second')});
is($task, $id, 'a worker claimed the task with a 1-second lease (and then vanished)');
my $claimed_at = sql(qq{SELECT claimed_at FROM orch.tasks WHERE id = $id});

# Nobody calls orch_dequeue or orch_maintain from here on: only pg_cron.
my $t0 = time;
my $recovered = wait_for(90,
	sub { sql(qq{SELECT state FROM orch.tasks WHERE id = $id}) ne 'executing' });
ok($recovered, 'the scheduled maintenance recovered the lease within 90 s')
  or diag(sql(q{SELECT string_agg(status || ' ' || coalesce(return_message, ''), '; ') FROM cron.job_run_details}));
note(sprintf('recovered after %.0f s', time - $t0));

is( sql(qq{SELECT state || ' ' || reason_code || ' ' || attempts || ' ' || failures || ' ' || (retry_at IS NOT NULL)
             FROM orch.tasks WHERE id = $id}),
	'awaiting_tool lease_expired 1 1 true',
	'the task is in retry-wait, reason lease_expired, 1 attempt, 1 failure');
is( sql(qq{SELECT outcome || ' ' || error_class || ' ' || worker || ' ' || (lease_token = '$token')
             FROM orch.attempts WHERE task_id = $id}),
	'lease_expired TRANSIENT gone-worker true',
	'its attempt is recorded as lease_expired, TRANSIENT, with the lost token');

# The recovery happened inside a succeeded run of our job.
ok( wait_for(30, sub {
		sql(qq{SELECT count(*) FROM cron.job_run_details d
                JOIN orch.events e ON e.task_id = $id AND e.to_state = 'awaiting_tool'
               WHERE d.jobid = $job AND d.status = 'succeeded'
                 AND e.at BETWEEN d.start_time AND d.end_time}) eq '1' }),
	'the recovery event lies within a succeeded run of the maintenance job');
is( sql(qq{SELECT count(*) FROM cron.job_run_details
            WHERE jobid = $job AND status <> 'succeeded'}),
	'0', 'no run of the job failed');

# --- unscheduling ----------------------------------------------------------
is(sql('SELECT orch_unschedule_maintenance()'), 't', 'orch_unschedule_maintenance() removes the job');
is(sql(q{SELECT count(*) FROM cron.job WHERE command LIKE '%orch_maintain%'}),
	'0', 'no maintenance job is left');
is(sql('SELECT orch_unschedule_maintenance()'), 'f', 'a second call finds nothing to remove');

# --- without pg_cron -------------------------------------------------------
sql('CREATE DATABASE nocron');
query($node, 'nocron', 'CREATE EXTENSION orchestrator');
is(query($node, 'nocron', q{SELECT count(*) FROM pg_extension WHERE extname = 'pg_cron'}),
	'0', 'database nocron has no pg_cron');
is(sqlstate_of($node, 'nocron', 'SELECT orch_schedule_maintenance()'),
	'55000', 'without pg_cron, orch_schedule_maintenance() raises 55000');
is(sqlstate_of($node, 'nocron', 'SELECT orch_unschedule_maintenance()'),
	'55000', 'without pg_cron, orch_unschedule_maintenance() raises 55000');
is(query($node, 'nocron', q{SELECT count(*) FROM orch_maintain() WHERE action = 'leases_recovered'}),
	'1', 'orch_maintain() works without pg_cron');

$node->stop;
done_testing();
