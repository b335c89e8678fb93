# t/013_pg_cron.pl: maintenance scheduled with pg_cron recovers an abandoned
# lease by itself, in the database where pg_cron lives and in another one.
#
# A node with shared_preload_libraries = 'pg_cron' and cron.database_name =
# 'postgres' (cron.host = the node's socket directory, so that pg_cron's
# libpq connections reach it).  CREATE EXTENSION pg_cron and orchestrator in
# postgres (before CREATE EXTENSION pg_cron, orch_schedule_maintenance() raises
# 55000 hinting to create it); orch_schedule_maintenance() returns the id of a job in cron.job
# named 'orchestrator-maintenance:postgres' (schedule '* * * * *', command
# orch_maintain(1000) schema-qualified, database postgres); it replaces the
# plainly named job of an older version that runs in this database, and
# calling it again re-registers the same job instead of adding one.
#
# Database other has orchestrator but not pg_cron: orch_schedule_maintenance()
# there raises 55000 naming database postgres, with the hint
#   In database "postgres", run: SELECT cron.schedule_in_database(
#     'orchestrator-maintenance:other', '* * * * *',
#     'SELECT * FROM public.orch_maintain(1000)', 'other');
# which, run in postgres, registers a job of database other.  Odd names are
# quoted (a database and a schema with ' and \ in them), and two long
# database names with a common prefix get two jobs (cron.job.jobname is a
# name: 63 bytes).
#
# A task claimed with a 1-second lease and abandoned, in postgres and in
# other, is then recovered by one real scheduled run of each job (pg_cron 1.4
# runs jobs at minute boundaries: we wait up to 90 s, polling the tasks;
# nothing calls orch_dequeue or orch_maintain meanwhile): the task goes to
# retry-wait with reason lease_expired, its attempt is recorded as
# lease_expired / TRANSIENT, and the recovery event falls inside a succeeded
# run of the job of its database.  The same runs drive a cron schedule made
# in postgres (every minute): its slot's task is enqueued by a run of the job
# (its fire event inside that run), one task per slot.
#
# orch_unschedule_maintenance() removes this database's job (true, then
# false) and the old plainly named job when it runs in this database, never
# one of another database; in other it raises 55000 whose hint, run in
# postgres, removes other's job.  In a database without pg_cron installed,
# orch_maintain() still works.  On a server without pg_cron loaded (where
# cron.database_name is only a placeholder), the 55000 hints to load it.
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

# error_of(DB, SQL): [SQLSTATE, message, hint] of the error SQL raises.
sub error_of
{
	my ($db, $q) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($db, "\\set VERBOSITY verbose\n$q",
		stdout => \$out, stderr => \$err);
	return [ 'ok', '', '' ] if $rc == 0;
	my ($state, $msg) = $err =~ /ERROR:\s+([0-9A-Z]{5}):\s+(.*)/;
	my ($hint) = $err =~ /^HINT:\s+(.*)$/m;
	return [ $state // "unknown: $err", $msg // '', $hint // '' ];
}

# The statement of a hint "In database "postgres", run: <SQL>".
sub hinted_sql
{
	my ($hint) = @_;
	return $hint =~ /^In database "postgres", run: (SELECT .*;)$/ ? $1 : undef;
}

# pg_cron is loaded, but not yet created in its own database.
sql('CREATE EXTENSION orchestrator');
my $e = error_of('postgres', 'SELECT orch_schedule_maintenance()');
is_deeply(
	$e,
	[ '55000', 'pg_cron is not installed in database "postgres"',
	  'Run CREATE EXTENSION pg_cron in this database, then call this function again.' ],
	'before CREATE EXTENSION pg_cron in its database: 55000, hint to create it');
sql('CREATE EXTENSION pg_cron');

# --- registration ----------------------------------------------------------
# The job of an older version had the same name in every database.
my $old = sql(q{SELECT cron.schedule_in_database('orchestrator-maintenance', '* * * * *',
                  'SELECT * FROM public.orch_maintain(1000)', 'postgres')});
my $job = sql('SELECT orch_schedule_maintenance()');
like($job, qr/^\d+$/, 'orch_schedule_maintenance() returns a job id');
is( sql(qq{SELECT jobname || ' | ' || schedule || ' | ' || database || ' | ' || command || ' | ' || active
             FROM cron.job WHERE jobid = $job}),
	'orchestrator-maintenance:postgres | * * * * * | postgres | SELECT * FROM public.orch_maintain(1000) | true',
	'the job is in cron.job: named for database postgres, every minute, orch_maintain() schema-qualified, active');
is(sql(qq{SELECT count(*) FROM cron.job WHERE jobid = $old OR jobname = 'orchestrator-maintenance'}),
	'0', "the old version's plainly named job of this database was replaced");
is(sql('SELECT orch_schedule_maintenance()'), $job, 'scheduling again returns the same job');
is(sql(q{SELECT count(*) FROM cron.job WHERE command LIKE '%orch_maintain%'}),
	'1', 'and leaves one maintenance job');

# --- another database, without pg_cron -------------------------------------
sql('CREATE DATABASE other');
query($node, 'other', 'CREATE EXTENSION orchestrator');
$e = error_of('other', 'SELECT orch_schedule_maintenance()');
is($e->[0], '55000', 'in database other (no pg_cron), orch_schedule_maintenance() raises 55000');
is($e->[1], 'pg_cron is not installed in database "other"', 'naming the database');
is( $e->[2],
	q{In database "postgres", run: SELECT cron.schedule_in_database('orchestrator-maintenance:other', }
	  . q{'* * * * *', 'SELECT * FROM public.orch_maintain(1000)', 'other');},
	'the hint is the cron.schedule_in_database call to run in postgres, where pg_cron lives');
my $other_job = sql(hinted_sql($e->[2]) // 'SELECT NULL');
like($other_job, qr/^\d+$/, 'the hinted statement, run in postgres, registers a job');
is( sql(qq{SELECT jobname || ' | ' || database || ' | ' || command FROM cron.job WHERE jobid = $other_job}),
	'orchestrator-maintenance:other | other | SELECT * FROM public.orch_maintain(1000)',
	'the job runs orch_maintain() in database other');
is( sql(q{SELECT string_agg(jobname, ', ' ORDER BY jobname) FROM cron.job}),
	'orchestrator-maintenance:other, orchestrator-maintenance:postgres',
	'both databases have their own job');

# Odd names: a database and the extension's schema with ' and \ in them.
$e = error_of('postgres', q{CREATE DATABASE "o'd\\b"});
is($e->[0], 'ok', q{database o'd\b created});
query($node, q{o'd\\b}, q{CREATE SCHEMA "s'c\\h"; CREATE EXTENSION orchestrator SCHEMA "s'c\\h"});
$e = error_of(q{o'd\\b}, q{SELECT "s'c\\h".orch_schedule_maintenance('*/5 * * * *')});
is($e->[0], '55000', 'odd names: 55000 too');
my $odd_job = sql(hinted_sql($e->[2]) // 'SELECT NULL');
like($odd_job, qr/^\d+$/, 'odd names: the hinted statement runs')
  or diag("hint: $e->[2]");
is( sql(qq{SELECT jobname || ' | ' || schedule || ' | ' || database || ' | ' || command
             FROM cron.job WHERE jobid = $odd_job}),
	q{orchestrator-maintenance:o'd\\b | */5 * * * * | o'd\\b | SELECT * FROM "s'c\\h".orch_maintain(1000)},
	'odd names: every literal arrived intact (name, schedule, database, quoted schema)');
sql("SELECT cron.unschedule($odd_job)");

# Long names: jobname is a name (63 bytes); a common prefix must not collide.
my @long = map { ('l' x 55) . "_$_" } qw(one two);
my @long_jobs;
for my $db (@long)
{
	sql(qq{CREATE DATABASE "$db"});
	query($node, $db, 'CREATE EXTENSION orchestrator');
	$e = error_of($db, 'SELECT orch_schedule_maintenance()');
	push @long_jobs, sql(hinted_sql($e->[2]) // 'SELECT NULL');
}
is( sql(qq{SELECT count(DISTINCT jobname) || ' ' || bool_and(octet_length(jobname) <= 63)
                  || ' ' || bool_and(jobname LIKE 'orchestrator-maintenance:lll%~________')
                  || ' ' || string_agg(database, ',' ORDER BY database)
             FROM cron.job WHERE jobid IN ($long_jobs[0], $long_jobs[1])}),
	"2 true true $long[0],$long[1]",
	'two long database names with one prefix get two jobs, named within 63 bytes');
sql("SELECT cron.unschedule($_)") for @long_jobs;

# --- an abandoned lease in each database -----------------------------------
my %task;
for my $db (qw(postgres other))
{
	query($node, $db, q{SELECT orch_create_queue('cron', '{"initial_delay": "1 hour"}')});
	$task{$db} = query($node, $db, q{SELECT orch_enqueue('cron', '{"job": "abandoned"}')});
}

# Claim right after a minute boundary has passed, so that the leases are over
# well before the next run (and the wait below is about one minute).
wait_for(10, sub { sql(q{SELECT extract(second FROM clock_timestamp()) BETWEEN 1 AND 50}) eq 't' });
my %token;
for my $db (qw(postgres other))
{
	my ($t, $tok) = split /\|/,
	  query($node, $db,
		q{SELECT task_id, lease_token FROM orch_dequeue('cron', 'gone-worker', 1, '1 second')});
	is($t, $task{$db}, "$db: a worker claimed the task with a 1-second lease (and then vanished)");
	$token{$db} = $tok;
}

# A cron schedule every minute: its slots are fired by the maintenance job.
query($node, 'postgres', q{SELECT orch_schedule('every-minute', '* * * * *', '{"queue": "cron_sched"}')});

# Nobody calls orch_dequeue or orch_maintain from here on: only pg_cron.
my $t0 = time;
my $recovered = wait_for(90, sub {
		query($node, 'postgres', qq{SELECT state FROM orch.tasks WHERE id = $task{postgres}}) ne 'executing'
		  && query($node, 'other', qq{SELECT state FROM orch.tasks WHERE id = $task{other}}) ne 'executing' });
ok($recovered, 'the scheduled maintenance recovered both leases within 90 s')
  or diag(sql(q{SELECT string_agg(jobid || ' ' || database || ' ' || status || ' ' || coalesce(return_message, ''), '; ')
                  FROM cron.job_run_details}));
note(sprintf('recovered after %.0f s', time - $t0));

my %job_of = (postgres => $job, other => $other_job);
for my $db (qw(postgres other))
{
	my $id = $task{$db};
	is( query($node, $db,
			qq{SELECT state || ' ' || reason_code || ' ' || attempts || ' ' || failures || ' ' || (retry_at IS NOT NULL)
                 FROM orch.tasks WHERE id = $id}),
		'awaiting_tool lease_expired 1 1 true',
		"$db: the task is in retry-wait, reason lease_expired, 1 attempt, 1 failure");
	is( query($node, $db,
			qq{SELECT outcome || ' ' || error_class || ' ' || worker || ' ' || (lease_token = '$token{$db}')
                 FROM orch.attempts WHERE task_id = $id}),
		'lease_expired TRANSIENT gone-worker true',
		"$db: its attempt is recorded as lease_expired, TRANSIENT, with the lost token");

	# The recovery happened inside a succeeded run of this database's job.
	my $at = query($node, $db,
		qq{SELECT at FROM orch.history WHERE task_id = $id AND to_state = 'awaiting_tool'});
	ok( wait_for(30, sub {
			sql(qq{SELECT count(*) FROM cron.job_run_details
                    WHERE jobid = $job_of{$db} AND database = '$db' AND status = 'succeeded'
                      AND '$at' BETWEEN start_time AND end_time}) eq '1' }),
		"$db: the recovery event lies within a succeeded run of the job, in database $db");
	is( sql(qq{SELECT count(*) FROM cron.job_run_details
                WHERE jobid = $job_of{$db} AND status <> 'succeeded'}),
		'0', "$db: no run of the job failed");
}

# The schedule's slots, fired by the runs of the job in postgres.
ok( wait_for(90, sub {
			query($node, 'postgres', q{SELECT count(*) > 0 FROM orch_tasks WHERE queue = 'cron_sched'}) eq 't' }),
	'postgres: a run of the maintenance job fired the schedule\'s slot');
my $fired_at = query($node, 'postgres', q{
    SELECT h.at FROM orch.history h JOIN orch.tasks t ON t.id = h.task_id AND t.tenant_id = h.tenant_id
     WHERE t.queue = 'cron_sched' AND h.reason_code = 'scheduled' ORDER BY h.id LIMIT 1});
ok( wait_for(30, sub {
		sql(qq{SELECT count(*) FROM cron.job_run_details
                WHERE jobid = $job AND database = 'postgres' AND status = 'succeeded'
                  AND '$fired_at' BETWEEN start_time AND end_time}) eq '1' }),
	'postgres: the fire event lies within a succeeded run of the job');
is( query($node, 'postgres', q{SELECT count(*) FROM (SELECT payload ->> 'scheduled_for' FROM orch_tasks
                                  WHERE queue = 'cron_sched' GROUP BY 1 HAVING count(*) > 1) d}),
	'0', 'postgres: one task per slot');
query($node, 'postgres', q{SELECT orch_unschedule('every-minute')});

# --- unscheduling ----------------------------------------------------------
is(sql('SELECT orch_unschedule_maintenance()'), 't', 'orch_unschedule_maintenance() removes the job');
is(sql(q{SELECT string_agg(jobname, ', ') FROM cron.job}),
	'orchestrator-maintenance:other', "only database other's job is left");
is(sql('SELECT orch_unschedule_maintenance()'), 'f', 'a second call finds nothing to remove');

$old = sql(q{SELECT cron.schedule_in_database('orchestrator-maintenance', '* * * * *',
               'SELECT * FROM public.orch_maintain(1000)', 'postgres')});
is(sql('SELECT orch_unschedule_maintenance()'), 't',
	"it removes the old version's plainly named job of this database");
is(sql(qq{SELECT count(*) FROM cron.job WHERE jobid = $old}), '0', 'which is gone');
$old = sql(q{SELECT cron.schedule_in_database('orchestrator-maintenance', '* * * * *',
               'SELECT * FROM public.orch_maintain(1000)', 'other')});
is(sql('SELECT orch_unschedule_maintenance()'), 'f',
	"but not the old plainly named job of another database");
is(sql(qq{SELECT count(*) FROM cron.job WHERE jobid = $old}), '1', 'which stays');
sql("SELECT cron.unschedule($old)");

$e = error_of('other', 'SELECT orch_unschedule_maintenance()');
is($e->[0], '55000', 'in database other, orch_unschedule_maintenance() raises 55000');
is( $e->[2],
	q{In database "postgres", run: SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = 'orchestrator-maintenance:other';},
	'its hint is the statement that removes the job, to run in postgres');
is(sql(hinted_sql($e->[2]) // 'SELECT NULL'), 't', 'run in postgres, it removes the job');
is(sql(q{SELECT count(*) FROM cron.job}), '0', 'no job is left');

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

# --- a server without pg_cron loaded ---------------------------------------
# cron.database_name in the configuration is then only a placeholder.
my $plain = PostgreSQL::Test::Cluster->new('no_pg_cron');
$plain->init;
$plain->append_conf('postgresql.conf', "cron.database_name = 'postgres'\n");
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION orchestrator');
my ($out, $err) = ('', '');
$plain->psql('postgres', "\\set VERBOSITY verbose\nSELECT orch_schedule_maintenance()",
	stdout => \$out, stderr => \$err);
like($err, qr/ERROR:\s+55000: pg_cron is not installed in database "postgres"/,
	'without pg_cron loaded: 55000');
like($err, qr/^HINT:\s+Load pg_cron \(shared_preload_libraries = 'pg_cron'\)/m,
	'and the hint says to load it (the placeholder setting is not taken for pg_cron)');
$plain->stop;

done_testing();
