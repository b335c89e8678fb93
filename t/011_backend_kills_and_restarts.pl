# t/011_backend_kills_and_restarts.pl: server crashes under load.
#
# The workload of t/010 (a producer enqueueing SOAK_JOBS jobs, default 5000,
# with idempotency keys; 4 psql workers claiming with a 2-second lease,
# logging each execution start and completing; a maintainer calling
# orch_maintain) runs while the server is crashed twice over:
#   1. SOAK_BACKEND_KILLS times (default 10) a worker's backend, found in
#      pg_stat_activity by its application_name, is killed with SIGKILL; the
#      postmaster then terminates every backend and reinitializes
#      (restart_after_crash = on; crash recovery replays the WAL);
#   2. SOAK_RESTARTS times (default 10) the server is stopped with mode
#      immediate (no shutdown checkpoint) and started again.
# The faults are spread over the run (one every jobs/(faults+2) completions
# plus a random delay) and each must land while jobs are pending.  Every
# client loses its connection at each fault; the workers, the maintainer and
# the producer are started again and continue (reconnect).  The producer logs
# an enqueue as acknowledged only after orch_enqueue returned, and resumes
# after the last acknowledged job; a job that committed without being
# acknowledged is re-enqueued with the same key and must come back as the
# same task.
#
# Pass criteria: those of t/010 (FaultHarness.pm, check_invariants) --
# every job completed exactly once, none lost or completed twice, no
# overlapping live executions, every enqueue acknowledged before a crash
# survived, events agree with states, no unexpected SQLSTATE, pg_amcheck
# clean -- and the server log shows that each fault really was a crash
# (one "all server processes terminated; reinitializing" per backend kill,
# one crash recovery per fault).
#
# Knobs: SOAK_JOBS, SOAK_BACKEND_KILLS, SOAK_RESTARTS, SOAK_SEED,
# SOAK_DRAIN_TIMEOUT.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FaultHarness qw(env_knob fault_node run_amcheck);

my $jobs     = env_knob('SOAK_JOBS',          5000);
my $kills    = env_knob('SOAK_BACKEND_KILLS', 10);
my $restarts = env_knob('SOAK_RESTARTS',      10);
my $drain    = env_knob('SOAK_DRAIN_TIMEOUT', 120 + int($jobs / 100));

my $node = fault_node('backend_kills');
my $run  = FaultHarness->new(
	node  => $node,
	label => '011_backend_kills_and_restarts',
	queue => 'crashes',
	jobs  => $jobs);
$run->setup;

# Count what the server log says from here on.
my $log_offset = -s $node->logfile;

$run->start;
my @faults = (
	(map { [ 'backend kill', sub { $_[0]->kill_random_backend } ] } 1 .. $kills),
	(map { [ 'immediate restart', sub { $_[0]->restart_immediate } ] } 1 .. $restarts));
ok($run->inject(\@faults, max_jitter => 0.2),
	"injected $kills backend kills, then $restarts immediate restarts");
is($run->{backend_kills} // 0, $kills, "$kills worker backends were killed with SIGKILL");
is($run->{restarts} // 0, $restarts, "the server was stopped (immediate) and started $restarts times");

$run->drain($drain);

my $log = slurp_file($node->logfile, $log_offset);
my $reinit = () = $log =~ /all server processes terminated; reinitializing/g;
my $recoveries = () = $log =~ /database system was (?:not properly shut down|interrupted)[^\n]*automatic recovery in progress/g;
is($reinit, $kills, "each backend kill made the postmaster reinitialize ($kills)");
cmp_ok($recoveries, '>=', $kills + $restarts,
	'each fault was followed by crash recovery (' . ($kills + $restarts) . ')');

my $c = $run->check_invariants;
cmp_ok($c->{lease_expired_attempts}, '>', 0,
	'the crashes interrupted executions (some leases expired and were recovered)');
cmp_ok($run->{exits}, '>=', ($kills + $restarts) * 4,
	'the clients lost their connections and were started again');
cmp_ok($run->{producer_restarts} // 0, '>=', 1,
	'crashes hit the producer mid-run and it resumed after its last acknowledged job');
run_amcheck($node, 'postgres');

$run->summary(
	backend_kills => $run->{backend_kills} // 0,
	restarts      => $run->{restarts} // 0);
$node->stop;
done_testing();
