# bench/citus_route.pl: claim + complete on Citus, one job per transaction,
# each pgbench client on one connection (the claiming session completes).
#
# Builds a coordinator and two workers (PostgreSQL::Test::Cluster, as
# t/050_citus.pl), distributes the tables with orch_distribute(32), enqueues
# the jobs, then runs pgbench for BENCH_SECONDS (default 15) per round:
#   - 1 client, tenant t1;
#   - 4 clients, tenants t1..t4 (one each);
#   - 1 client as a role bound to tenant t1 (no tenant argument);
#   - 1 client that connects for every job (-C): the claim and the complete
#     still share the connection, and the connection (to the coordinator,
#     and the coordinator's to the workers) is most of the cost;
#   - 1 client that only completes tasks another session claimed (an
#     unbound caller behind a transaction-mode pooler): each completion
#     looks its task's tenant up across the shards.
# and prints jobs/s (pgbench's transactions/s: one claim + one complete) to
# the log (tmp_check/log/regress_log_citus_route) and to the file BENCH_OUT.
#
# Run as the postgres OS user with the PostgreSQL 15 TAP modules, e.g.
#   runuser -u postgres -- env PATH=/usr/lib/postgresql/15/bin:$PATH \
#     PG_REGRESS=/usr/lib/postgresql/15/lib/pgxs/src/test/regress/pg_regress \
#     perl -I /usr/lib/postgresql/15/lib/pgxs/src/test/perl bench/citus_route.pl
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use File::Temp qw(tempdir);

my $seconds = $ENV{BENCH_SECONDS} // 15;
my $shards = $ENV{BENCH_SHARDS} // 32;

my $coord = PostgreSQL::Test::Cluster->new('coordinator');
my @workers = map { PostgreSQL::Test::Cluster->new("worker$_") } (1, 2);
for my $node ($coord, @workers)
{
	$node->init;
	$node->append_conf('postgresql.conf', <<EOC);
shared_preload_libraries = 'citus'
max_connections = 100
fsync = off
log_statement = none
log_min_messages = warning
EOC
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION citus');
}
$coord->safe_psql('postgres', sprintf("SELECT citus_set_coordinator_host('%s', %d)", $coord->host, $coord->port));
$coord->safe_psql('postgres', sprintf("SELECT citus_add_node('%s', %d)", $_->host, $_->port)) for @workers;
$coord->safe_psql('postgres', 'CREATE EXTENSION orchestrator');
$coord->safe_psql('postgres', "SELECT count(*) FROM orch_distribute($shards)");
$coord->safe_psql('postgres', q{SELECT orch_create_queue('b', '{"lease": "10 minutes"}')});
$coord->safe_psql('postgres', q{CREATE ROLE bound LOGIN; GRANT orch_worker TO bound;
	SELECT orch_bind_tenant('bound', 't1')});

my $dir = tempdir(CLEANUP => 1);
my $script = "$dir/claim_complete.sql";
open my $f, '>', $script or die;
print $f <<'EOS';
\set n :client_id + 1
SELECT task_id AS id, quote_literal(lease_token) AS tok FROM orch_dequeue('b', 'w', 1, tenant => 't' || :n) \gset
SELECT orch_complete(:id, :tok);
EOS
close $f;
my $bound_script = "$dir/claim_complete_bound.sql";
open $f, '>', $bound_script or die;
print $f <<'EOS';
SELECT task_id AS id, quote_literal(lease_token) AS tok FROM orch_dequeue('b', 'w', 1) \gset
SELECT orch_complete(:id, :tok);
EOS
close $f;

my $other_script = "$dir/complete_claimed_elsewhere.sql";
open $f, '>', $other_script or die;
print $f <<'EOS';
SELECT id, quote_literal(tok) AS tok FROM bench_claimed WHERE n = (SELECT nextval('bench_next')) \gset
SELECT orch_complete(:id, :tok);
EOS
close $f;

sub refill
{
	# enough jobs in each tenant for a round (a claim that finds none fails)
	$coord->safe_psql('postgres', qq{
		SELECT count(*) FROM generate_series(1, 4) t, generate_series(1, 10) b,
		  LATERAL (SELECT orch_enqueue_batch('b', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 1000)),
		                                     tenant => 't' || t) WHERE b > 0) e});
}

sub round
{
	my ($name, $script, $clients, @opts) = @_;
	refill();
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'pgbench', '-n', '-h', $coord->host, '-p', $coord->port, '-f', $script,
			'-c', $clients, '-j', $clients, '-T', $seconds, @opts, 'postgres' ],
		'>', \$out, '2>', \$err);
	my ($tps) = $out =~ /tps = ([0-9.]+) \((?:without initial connection time|including connections establishing)?/;
	($tps) = $out =~ /tps = ([0-9.]+)/ unless defined $tps;
	my ($failed) = $out =~ /number of failed transactions: (\d+)/;
	my $line = sprintf "%-46s %8.1f jobs/s%s\n", $name, $tps // -1,
	  ($failed ? " ($failed failed)" : '') . ($err =~ /ERROR/ ? " errors: $err" : '');
	report($line);
}

# the TAP modules send STDOUT to the log: the figures also go to BENCH_OUT
sub report
{
	my ($line) = @_;
	print $line;
	if ($ENV{BENCH_OUT})
	{
		open my $o, '>>', $ENV{BENCH_OUT} or die "$ENV{BENCH_OUT}: $!";
		print $o $line;
		close $o;
	}
}

report("claim + complete, coordinator + 2 workers, $shards shards, ${seconds} s per round\n");
round('1 client, same session', $script, 1);
round('4 clients (tenants t1..t4), same session', $script, 4);
round('1 client, role bound to t1', $bound_script, 1, '-U', 'bound');
round('1 client, a new connection per job (-C)', $script, 1, '-C');

# tasks claimed by another session (4,000 of t1, listed in a local table):
# each completion's session has not seen the task, so it looks it up
$coord->safe_psql('postgres', 'CREATE TABLE bench_claimed (n bigserial PRIMARY KEY, id bigint, tok uuid);'
	  . ' CREATE SEQUENCE bench_next;'
	  . join('', map { " INSERT INTO bench_claimed (id, tok) SELECT task_id, lease_token"
			  . " FROM orch_dequeue('b', 'elsewhere', 500, tenant => 't1');" } 1 .. 8));
round('1 client, completes tasks claimed elsewhere', $other_script, 1);

$_->stop for reverse(@workers), $coord;
