# t/010_worker_kills.pl: kill -9 of worker client processes at random points.
#
# A producer enqueues SOAK_JOBS jobs (default 5000) while 4 worker processes
# (psql clients) claim them with a 2-second lease, record each execution's
# start in exec_log in its own committed statement, "work" for up to 4 ms
# and complete them, and a maintainer calls orch_maintain() every 0.2 s.
# SOAK_KILLS times (default 30) a random worker process is killed with
# SIGKILL -- after its claim, after its execution log, during its work or
# during its orch_complete, wherever it is -- and a new worker takes its
# place.  The kills are spread over the run (one every jobs/(kills+2)
# completions plus a random delay) and each must land while jobs are
# pending.  The run then drains: the killed claims' leases expire and are
# recovered by orch_maintain or by the lazy recovery in orch_dequeue.
#
# Pass criteria (FaultHarness.pm, check_invariants, defines each exactly):
# every job ends completed exactly once, nothing is lost or completed twice,
# no two executions of a task with live leases overlap, every acknowledged
# enqueue survives, events agree with task states, no unexpected SQLSTATE
# reached a client, and pg_amcheck finds nothing.
#
# Knobs (environment): SOAK_JOBS, SOAK_KILLS, SOAK_SEED, SOAK_DRAIN_TIMEOUT.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FaultHarness qw(env_knob fault_node run_amcheck);

my $jobs  = env_knob('SOAK_JOBS',  5000);
my $kills = env_knob('SOAK_KILLS', 30);
my $drain = env_knob('SOAK_DRAIN_TIMEOUT', 120 + int($jobs / 100));

my $node = fault_node('worker_kills');
my $run  = FaultHarness->new(
	node  => $node,
	label => '010_worker_kills',
	queue => 'kills',
	jobs  => $jobs);
$run->setup;
$run->start;

my @faults = map { [ 'worker kill', sub { $_[0]->kill_random_worker } ] } 1 .. $kills;
ok($run->inject(\@faults, max_jitter => 0.15), "injected $kills worker kills");
is($run->{worker_kills} // 0, $kills, "$kills worker processes were killed with SIGKILL");

$run->drain($drain);
my $c = $run->check_invariants;
cmp_ok($c->{lease_expired_attempts}, '>', 0,
	'the kills interrupted executions (some leases expired and were recovered)');
run_amcheck($node, 'postgres');

$run->summary(kills => $run->{worker_kills} // 0);
$node->stop;
done_testing();
