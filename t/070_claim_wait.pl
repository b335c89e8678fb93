# t/070_claim_wait.pl: claims that wait (orch_dequeue with wait).
#
# On two nodes: one with the library in shared_preload_libraries (a commit
# wakes the waiting claims of its queue) and one without (the fallback: a
# waiting claim looks again after 1 ms, then twice as long each time up to
# 100 ms).  On each:
#   - a claim with a task there returns it at once;
#   - a claim that waits, asleep (its backend waits on event type Extension),
#     is handed the task a producer commits meanwhile;
#   - two waiting claims and one task: one gets it, the other none;
#   - a task enqueued for later (run_at ahead) wakes the claim when it comes
#     due, with no commit;
#   - a cancel (pg_cancel_backend) and statement_timeout end a waiting claim
#     with 57014 and nothing claimed;
#   - a paused queue is waited on, and its resume wakes the claim;
#   - wait over orchestrator.max_claim_wait: 22023; under REPEATABLE READ: 0A000.
# Paced by state: each step waits until the claim is asleep (pg_stat_activity),
# and the generous timeouts only bound a hang.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;

use IPC::Run ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FaultHarness qw(query sqlstate_of wait_for);

my %nodes;
$nodes{preloaded} = PostgreSQL::Test::Cluster->new('claim_wait_preloaded');
$nodes{preloaded}->init;
$nodes{preloaded}->append_conf('postgresql.conf', "shared_preload_libraries = 'orchestrator'\n");
$nodes{fallback} = PostgreSQL::Test::Cluster->new('claim_wait_fallback');
$nodes{fallback}->init;

# A query in the background: (harness, \stdout, \stderr).
sub start_query
{
	my ($node, $sql, $app) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-q', '-v', 'VERBOSITY=verbose',
		  '-d', $node->connstr('postgres') . " application_name=$app", '-c', $sql ],
		'<', \undef, '>', \$out, '2>', \$err);
	return ($h, \$out, \$err);
}

# Wait until the backend of application $app is asleep in a waiting claim.
sub asleep
{
	my ($node, $app) = @_;
	return wait_for(60,
		sub {
			query($node, 'postgres',
				qq{SELECT count(*) FROM pg_stat_activity WHERE application_name = '$app'
				    AND state = 'active' AND wait_event_type = 'Extension'}) eq '1';
		});
}

# Finish a background query (bounded): its output, trimmed.
sub finish_query
{
	my ($h, $out) = @_;
	$h->finish;
	my $o = $$out;
	$o =~ s/\s+$//;
	return $o;
}

foreach my $kind (sort keys %nodes)
{
	my $node = $nodes{$kind};
	$node->start;
	my $sql = sub { query($node, 'postgres', $_[0]) };
	$sql->(q{CREATE EXTENSION orchestrator});
	$sql->(q{SELECT orch_create_queue('cw')});

	# a task there: at once
	my $t1 = $sql->(q{SELECT orch_enqueue('cw', '{"n": 1}')});
	is($sql->(q{SELECT task_id FROM orch_dequeue('cw', 'w', wait => '60 s')}),
		$t1, "$kind: a waiting claim with a task there returns it");

	# asleep, then handed the task a producer commits
	my ($h, $out, $err) = start_query($node,
		q{SELECT task_id FROM orch_dequeue('cw', 'w', wait => '120 s')}, 'cw_waiter');
	ok(asleep($node, 'cw_waiter'), "$kind: the claim waits (asleep, no task)");
	my $t2 = $sql->(q{SELECT orch_enqueue('cw', '{"n": 2}')});
	is(finish_query($h, $out), $t2, "$kind: it is handed the task committed meanwhile");
	is($sql->(qq{SELECT state FROM orch.tasks WHERE id = $t2}), 'executing', "$kind: ... claimed");

	# two waiting, one task: one gets it
	my ($ha, $oa) = start_query($node, q{SELECT task_id FROM orch_dequeue('cw', 'a', wait => '3 s')}, 'cw_a');
	my ($hb, $ob) = start_query($node, q{SELECT task_id FROM orch_dequeue('cw', 'b', wait => '3 s')}, 'cw_b');
	ok(asleep($node, 'cw_a') && asleep($node, 'cw_b'), "$kind: two claims wait");
	my $t3 = $sql->(q{SELECT orch_enqueue('cw', '{"n": 3}')});
	my @got = grep { $_ ne '' } (finish_query($ha, $oa), finish_query($hb, $ob));
	is_deeply(\@got, [$t3], "$kind: one of them got the task, the other none at the end of its wait");

	# a task for later wakes the claim when it comes due (no commit then)
	my $t4 = $sql->(q{SELECT orch_enqueue('cw', '{"n": 4}', run_at => clock_timestamp() + interval '2 s')});
	is($sql->(q{SELECT count(*) FROM orch_dequeue('cw', 'w')}), '0', "$kind: the later task is not claimable yet");
	is($sql->(q{SELECT task_id FROM orch_dequeue('cw', 'w', wait => '60 s')}),
		$t4, "$kind: a waiting claim gets it when it comes due");

	# a cancel: 57014, nothing claimed
	($h, $out, $err) = start_query($node, q{SELECT task_id FROM orch_dequeue('cw', 'w', wait => '120 s')}, 'cw_cancel');
	ok(asleep($node, 'cw_cancel'), "$kind: a claim waits");
	$sql->(q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'cw_cancel'});
	finish_query($h, $out);
	like($$err, qr/57014/, "$kind: pg_cancel_backend ends it with 57014");
	is(sqlstate_of($node, 'postgres',
			q{SET statement_timeout = '300ms'; SELECT orch_dequeue('cw', 'w', wait => '60 s')}),
		'57014', "$kind: statement_timeout ends it with 57014");
	is($sql->(q{SELECT count(*) FROM orch.tasks WHERE queue = 'cw' AND state <> 'executing'}), '0',
		"$kind: nothing left unclaimed, nothing claimed by the cancelled waits");

	# a paused queue is waited on; its resume wakes the claim
	$sql->(q{SELECT orch_pause_queue('cw')});
	my $t5 = $sql->(q{SELECT orch_enqueue('cw', '{"n": 5}')});
	($h, $out, $err) = start_query($node, q{SELECT task_id FROM orch_dequeue('cw', 'w', wait => '120 s')}, 'cw_paused');
	ok(asleep($node, 'cw_paused'), "$kind: a claim waits on a paused queue with a task");
	$sql->(q{SELECT orch_resume_queue('cw')});
	is(finish_query($h, $out), $t5, "$kind: the queue's resume hands it the task");

	# bad input
	is(sqlstate_of($node, 'postgres', q{SELECT orch_dequeue('cw', 'w', wait => '301 s')}),
		'22023', "$kind: a wait over orchestrator.max_claim_wait is 22023");
	is(sqlstate_of($node, 'postgres', q{SELECT orch_dequeue('cw', 'w', wait => '0 s')}),
		'22023', "$kind: a wait of 0 is 22023");
	is(sqlstate_of($node, 'postgres',
			q{BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT orch_dequeue('cw', 'w', wait => '1 s'); COMMIT}),
		'0A000', "$kind: a waiting claim under REPEATABLE READ is 0A000");
	$node->stop;
}

done_testing();
