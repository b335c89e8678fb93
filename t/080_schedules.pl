# t/080_schedules.pl: cron schedules across server stops.
#
# Three schedules every 10 minutes (overlap allow, so that only the
# catch-up policy decides): catch_up skip, catch_up all (window 1 hour) and
# catch_up all with a 25-minute window.  Their first slot fires; the server
# is stopped and started again, and the next tick comes three hours of slots
# later (orch_schedule_tick(as_of => ...), explicit times: nothing sleeps on
# the clock).  Each policy fires exactly what it promises: skip the latest
# slot only, all the slots of its window, every older slot counted skipped.
# A tick in flight when the server crashes fires nothing (it rolled back);
# the tick after the restart fires those slots once.  What was fired is
# durable: ticking the same time again fires nothing, and a tick after the
# next restart goes on from the next slot.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('schedules');
$node->init;
$node->start;

sub query { return $node->safe_psql('postgres', $_[0]); }

query('CREATE EXTENSION orchestrator');

# The three schedules and their first slot, m1 (made in one transaction, so
# that every schedule's first slot is the one after that transaction's now()).
my $m1 = query(q{
    BEGIN;
    SELECT orch_schedule('cu_skip', '*/10 * * * *', '{"queue": "cu_skip"}', '{"overlap": "allow"}');
    SELECT orch_schedule('cu_all', '*/10 * * * *', '{"queue": "cu_all"}',
                         '{"overlap": "allow", "catch_up": "all"}');
    SELECT orch_schedule('cu_25m', '*/10 * * * *', '{"queue": "cu_25m"}',
                         '{"overlap": "allow", "catch_up": "all", "catch_up_window": "25 minutes"}');
    COMMIT;
    SELECT DISTINCT next_fire_at FROM orch.schedules;});
$m1 =~ s/^\s+|\s+$//g;
like($m1, qr/^\d{4}-\d\d-\d\d \d\d:\d0:00/, "the three schedules share their first slot ($m1)");

# at(minutes): the time m1 + minutes, as a SQL literal
sub at { my $min = shift; return "('$m1'::timestamptz + interval '$min minutes')"; }

# fired(name): the slots of the schedule's tasks, in minutes after m1
sub fired
{
	my $name = shift;
	return query(qq{SELECT coalesce(string_agg(extract(epoch FROM
	                   ((payload ->> 'scheduled_for')::timestamptz - '$m1'::timestamptz))::int / 60 || '',
	                   ',' ORDER BY task_id), '')
	                  FROM orch_tasks WHERE queue = '$name'});
}

# counts(name): fired/skipped of the schedule
sub counts
{
	my $name = shift;
	return query(qq{SELECT fired || '/' || skipped FROM orch_schedules WHERE name = '$name'});
}

is(query('SELECT orch_schedule_tick(' . at(0) . ')'), '3', 'the first slot fires for each of the three');
is(fired($_), '0', "$_: the task of the first slot") for qw(cu_skip cu_all cu_25m);

# The server stops; three hours of slots pass before the next tick.
$node->stop('fast');
$node->start;
is(query('SELECT count(*) FROM orch_schedules WHERE next_fire_at = ' . at(10)),
	'3', 'after the restart each schedule waits for its second slot');

# A tick in flight when the server crashes: it fired, but never committed.
my $sess = $node->background_psql('postgres');
$sess->query_safe('BEGIN');
is($sess->query_safe('SELECT orch_schedule_tick(' . at(180) . ')'),
	'11', 'a tick three hours later fires 1 + 7 + 3 slots in its transaction');
$node->stop('immediate');
$sess->quit;
$node->start;
is(query(q{SELECT count(*) FROM orch_tasks WHERE queue LIKE 'cu\_%'}),
	'3', 'the crash took back what the uncommitted tick fired');
is(query('SELECT count(*) FROM orch_schedules WHERE next_fire_at = ' . at(10)),
	'3', 'and the schedules still wait for their second slot');

# The tick after the restart, as of three hours of slots after the first.
is(query('SELECT orch_schedule_tick(' . at(180) . ')'), '11', 'the tick after the restart fires 11 slots');
is(fired('cu_skip'), '0,180', 'catch_up skip: only the latest missed slot fired');
is(counts('cu_skip'), '2/17', 'catch_up skip: the 17 older missed slots are counted skipped');
is(fired('cu_all'), '0,120,130,140,150,160,170,180', 'catch_up all: every slot of the last hour fired');
is(counts('cu_all'), '8/11', 'catch_up all: the 11 slots before the window are counted skipped');
is(fired('cu_25m'), '0,160,170,180', 'catch_up all, 25 minutes: the slots of its window fired');
is(counts('cu_25m'), '4/15', 'catch_up all, 25 minutes: 15 skipped');

# Durable: the same tick again fires nothing, after another crash too.
is(query('SELECT orch_schedule_tick(' . at(180) . ')'), '0', 'ticking the same time again fires nothing');
$node->stop('immediate');
$node->start;
is(query('SELECT orch_schedule_tick(' . at(185) . ')'), '0', 'after a crash: nothing due before the next slot');
is(query('SELECT orch_schedule_tick(' . at(190) . ')'), '3', 'the next slot fires once for each');
is(fired('cu_all'), '0,120,130,140,150,160,170,180,190', 'catch_up all went on from its next slot');
is( query(q{SELECT count(*) FROM (SELECT idempotency_key FROM orch_tasks WHERE queue LIKE 'cu\_%'
              GROUP BY 1 HAVING count(*) > 1) d}),
	'0', 'no slot has two tasks');
is( query(q{SELECT count(*) FROM orch_events e JOIN orch_tasks t USING (task_id)
             WHERE t.queue LIKE 'cu\_%' AND e.reason_code = 'scheduled'}),
	query(q{SELECT count(*) FROM orch_tasks WHERE queue LIKE 'cu\_%'}),
	'each task has the one event of its fire');

$node->stop;
done_testing();
