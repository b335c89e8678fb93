# bench/citus_scale.pl: the same work on one node and on Citus with one and
# two workers (issue 23 item 6), one job per pgbench transaction, each
# client on its own connection and tenant (t1..t4).
#
# Builds three installations side by side (PostgreSQL::Test::Cluster, as
# t/050_citus.pl):
#   - one node: the orchestrator on a plain PostgreSQL (no Citus);
#   - coordinator + 1 worker: orch_distribute(BENCH_SHARDS);
#   - coordinator + 2 workers: the same, with tenants t1..t4 spread over
#     both workers (two each: the tenants are picked by their shard's node).
# and runs, for BENCH_SECONDS (default 15) each, with 4 clients:
#   - claim + complete: orch_dequeue of one task of the client's tenant,
#     orch_complete in the same session;
#   - batch: a claim of 100 and orch_complete_batch of the 100;
#   - workflow: orch_start of a one-step run in the client's tenant, the
#     claim of its step's task and its completion (the run succeeds on the
#     tenant's shard);
# BENCH_REPS times (default 3), the three installations alternating within
# each repetition, and prints each figure (pgbench's transactions/s, in
# jobs/s: for batch, 100 jobs per transaction) with the median of the
# repetitions, to the log (tmp_check/log/regress_log_citus_scale) and to
# the file BENCH_OUT.
#
# Every node runs on this machine: the workers share its cores with the
# coordinator and pgbench, so the figures show what Citus costs per job
# here, not what more machines would add.
#
# Run as the postgres OS user with the PostgreSQL 15 TAP modules, e.g.
#   runuser -u postgres -- env PATH=/usr/lib/postgresql/15/bin:$PATH \
#     PG_REGRESS=/usr/lib/postgresql/15/lib/pgxs/src/test/regress/pg_regress \
#     perl -I /usr/lib/postgresql/15/lib/pgxs/src/test/perl bench/citus_scale.pl
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use File::Temp qw(tempdir);

my $seconds = $ENV{BENCH_SECONDS} // 15;
my $shards = $ENV{BENCH_SHARDS} // 8;
my $reps = $ENV{BENCH_REPS} // 3;

my $conf = <<EOC;
max_connections = 100
fsync = off
log_statement = none
log_min_messages = warning
EOC

sub node
{
	my ($name, $citus) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', $conf . ($citus ? "shared_preload_libraries = 'citus'\n" : ''));
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION citus') if $citus;
	return $node;
}

# an installation: its node for calls, and its tenants t1..t4
my %inst;
$inst{'one node'} = { node => node('single', 0), nodes => [] };
for my $n (1, 2)
{
	my $coord = node("coord$n", 1);
	my @workers = map { node("c${n}worker$_", 1) } 1 .. $n;
	$coord->safe_psql('postgres',
		sprintf("SELECT citus_set_coordinator_host('%s', %d)", $coord->host, $coord->port));
	$coord->safe_psql('postgres', sprintf("SELECT citus_add_node('%s', %d)", $_->host, $_->port))
	  for @workers;
	$inst{"coordinator + $n worker" . ($n > 1 ? 's' : '')} = { node => $coord, nodes => [ @workers ] };
}
my @order = ('one node', 'coordinator + 1 worker', 'coordinator + 2 workers');

for my $name (@order)
{
	my $node = $inst{$name}{node};
	$node->safe_psql('postgres', 'CREATE EXTENSION orchestrator');
	$node->safe_psql('postgres', "SELECT count(*) FROM orch_distribute($shards)")
	  if @{ $inst{$name}{nodes} };
	$node->safe_psql('postgres', q{SELECT orch_create_queue('b', '{"lease": "10 minutes"}')});
	$node->safe_psql('postgres', q{SELECT orch_define('wf1', '{"steps": [{"step_id": "s", "queue": "b", "handler": "s"}]}')});
	$node->safe_psql('postgres', q{SELECT orch_publish('wf1', 1)});
	# the tenants: t1..t4 on one node; on Citus, two per worker when there are two
	my @tenants = map { "t$_" } 1 .. 4;
	if (@{ $inst{$name}{nodes} } == 2)
	{
		my %by_group;
		for my $i (1 .. 200)
		{
			my $g = $node->safe_psql('postgres', "SELECT p.groupid FROM pg_dist_placement p"
				  . " WHERE p.shardid = get_shard_id_for_distribution_column('orch.tasks', 'ten$i')");
			push @{ $by_group{$g} }, "ten$i";
		}
		my @groups = sort keys %by_group;
		die "tenants not spread over two workers" unless @groups == 2;
		@tenants = (@{ $by_group{ $groups[0] } }[0, 1], @{ $by_group{ $groups[1] } }[0, 1]);
	}
	$inst{$name}{tenants} = [@tenants];
	$node->safe_psql('postgres', 'CREATE TABLE bench_tenant (n int PRIMARY KEY, tenant text)'
		  . ($node == $inst{'one node'}{node} ? '' : '; SELECT create_reference_table(\'bench_tenant\')'));
	$node->safe_psql('postgres', 'INSERT INTO bench_tenant VALUES '
		  . join(', ', map { sprintf("(%d, '%s')", $_ + 1, $tenants[$_]) } 0 .. 3));
}

my $dir = tempdir(CLEANUP => 1);
my %script;
sub script
{
	my ($name, $text) = @_;
	$script{$name} = "$dir/$name.sql";
	open my $f, '>', $script{$name} or die;
	print $f "\\set n :client_id + 1\n"
	  . "SELECT quote_literal(tenant) AS tenant FROM bench_tenant WHERE n = :n \\gset\n" . $text;
	close $f;
}
script('claim_complete', <<'EOS');
SELECT task_id AS id, quote_literal(lease_token) AS tok FROM orch_dequeue('b', 'w', 1, tenant => :tenant) \gset
SELECT orch_complete(:id, :tok);
EOS
script('batch', <<'EOS');
SELECT quote_literal(array_agg(task_id)) AS ids, quote_literal(array_agg(lease_token)) AS toks
  FROM orch_dequeue('b', 'w', 100, tenant => :tenant) \gset
SELECT orch_complete_batch(:ids::bigint[], :toks::uuid[]);
EOS
script('workflow', <<'EOS');
SELECT orch_start('wf1', '{}', tenant => :tenant) AS run \gset
SELECT task_id AS id, quote_literal(lease_token) AS tok FROM orch_dequeue('b', 'w', 1, tenant => :tenant) \gset
SELECT orch_complete(:id, :tok);
EOS
my %per_txn = (claim_complete => 1, batch => 100, workflow => 1);

sub refill
{
	my ($name, $jobs) = @_;
	my $node = $inst{$name}{node};
	# the queue emptied first (a run's task must be the one its round claims)
	$node->safe_psql('postgres', "SELECT count(*) FROM orch_drop_queue('b', true)");
	$node->safe_psql('postgres', q{SELECT orch_create_queue('b', '{"lease": "10 minutes"}')});
	return unless $jobs;
	for my $t (@{ $inst{$name}{tenants} })
	{
		$node->safe_psql('postgres', "SELECT count(*) FROM generate_series(1, $jobs / 1000) b,"
			  . " LATERAL (SELECT orch_enqueue_batch('b', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 1000)),"
			  . " tenant => '$t') WHERE b > 0) e");	# (b: once per row of the series)
	}
}

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

my %fig;
my %jobs = (claim_complete => 30000, batch => 250000, workflow => 0);
report("one node vs Citus on one machine, $shards shards, 4 clients, ${seconds} s per round, $reps repetitions\n");
for my $rep (1 .. $reps)
{
	for my $work (qw(claim_complete batch workflow))
	{
		for my $name ($rep % 2 ? @order : reverse @order)
		{
			refill($name, $jobs{$work});
			my $node = $inst{$name}{node};
			my ($out, $err) = ('', '');
			IPC::Run::run([ 'pgbench', '-n', '-h', $node->host, '-p', $node->port, '-f', $script{$work},
					'-c', 4, '-j', 4, '-T', $seconds, 'postgres' ], '>', \$out, '2>', \$err);
			my ($tps) = $out =~ /tps = ([0-9.]+)/;
			my ($failed) = $out =~ /number of failed transactions: (\d+)/;
			my $jps = ($tps // 0) * $per_txn{$work};
			push @{ $fig{$work}{$name} }, $jps;
			report(sprintf("rep %d  %-15s %-24s %9.1f jobs/s%s\n", $rep, $work, $name, $jps,
					($failed ? " ($failed failed)" : '') . ($err =~ /ERROR/ ? " errors: $err" : '')));
		}
	}
}

sub median
{
	my @v = sort { $a <=> $b } @_;
	return $v[ int(@v / 2) ];
}
report("\nmedian jobs/s (ratio to one node)\n");
for my $work (qw(claim_complete batch workflow))
{
	my $base = median(@{ $fig{$work}{'one node'} });
	report(sprintf("%-15s %s\n", $work, join('   ',
		map { sprintf("%s %.1f (%.2fx)", $_, median(@{ $fig{$work}{$_} }),
				$base ? median(@{ $fig{$work}{$_} }) / $base : 0) } @order)));
}

$_->stop for map { (reverse(@{ $inst{$_}{nodes} }), $inst{$_}{node}) } @order;
