# t/FaultHarness.pm: shared helpers for the fault-injection TAP tests
# (t/010_worker_kills.pl, t/011_backend_kills_and_restarts.pl,
# t/012_stall.pl, t/013_pg_cron.pl) and their soak mode (test/soak.sh).
#
# A "run" drives a real workload against a PostgreSQL::Test::Cluster node
# with plain psql client processes (no DBD::Pg needed):
#
#   producer    one psql process that enqueues the jobs 1..N in chunks, each
#               with idempotency key 'job-<n>', and prints "n|task_id" for
#               every enqueue only after orch_enqueue returned (the
#               acknowledgement log).  When it dies it is restarted from the
#               last acknowledged job + 1; re-enqueueing a job that committed
#               but was never acknowledged returns the same task (same key,
#               same payload), so every job exists exactly once.  It waits
#               while 200 jobs are claimable, so it keeps enqueueing (and
#               meets the faults) through the whole run.
#   workers     W psql processes, each running a script of claim / log /
#               work / complete iterations:
#                 1. orch_dequeue(queue, worker, 1, lease)          (commits)
#                 2. INSERT INTO exec_log (task, token, lease_expires_at,
#                    started = clock_timestamp())                  (commits)
#                 3. pg_sleep(random() * work_max)           (the "work")
#                 4. orch_complete(task, token)
#                 5. when it returned: INSERT INTO complete_ack (task, token)
#               A worker that is killed, loses its connection or reaches the
#               end of its script is started again (a new worker name).
#   maintainer  one psql process calling orch_maintain() every 0.2 s.
#
# Faults are injected by the test (a callback per fault): the i-th of F once
# i * N / (F + 2) jobs have completed, plus a random delay, so that they are
# spread over the run and every one lands while work is pending (checked;
# and made so by state, not by the clock: until the last fault is in, the
# workers do not claim past one share beyond the next fault's mark, see
# fh_gate).  After the last fault the run drains: killed claims are
# recovered by orch_maintain and by the lazy recovery in orch_dequeue.
#
# check_invariants() then verifies, with one TAP test each:
#   - every job 1..N has exactly one task, and it is completed (lost = 0);
#   - every acknowledged enqueue (n, id) is that completed task;
#   - exactly one 'completed' attempt row and one -> completed event per
#     task, one terminal event per task, and every completion acknowledged
#     to a worker (complete_ack) is the task's completing lease token;
#   - lease tokens are unique, every execution start (exec_log) has exactly
#     one attempt row with its token (no claim vanished), attempt numbers are
#     1..attempts, failures = lease_expired attempts, all but the last
#     attempt are lease_expired;
#   - no overlap of executions (see below);
#   - the events agree with the task: they form a chain (each from_state is
#     the previous to_state, starting received -> queued), the last event's
#     to_state is the task's state, and there is one -> executing event per
#     attempt;
#   - the client logs show no unexpected SQLSTATE (XX000 or anything else
#     than lease/terminal errors and connection loss) and no counter
#     mismatch warning from orch_maintain;
#   - after one more fold, the metrics counters of the queue (enqueued,
#     started, finished/completed, attempts by outcome) are what its
#     history holds: every transition counted once, though the maintainer's
#     folds ran between the faults;
#   - pg_amcheck --heapallindexed --parent-check finds nothing.
#
# Overlap, exactly: an execution is one claim (lease token) of a task.  Its
# live interval is [started, live_end) where started is the exec_log time
# (clock_timestamp() after the claim committed) and live_end is
#   - for the execution whose token completed the task (the "accepted"
#     one): min(time of its orch_complete (the finished_at of its
#     'completed' attempt row), its lease_expires_at),
#   - for any other execution: its lease_expires_at (the latest moment the
#     lease allowed it to act; it may run on afterwards, but fenced).
# Violations counted as "overlaps":
#   a) two executions of one task with distinct tokens whose live intervals
#      intersect;
#   b) an accepted execution whose orch_complete ran at or after its
#      lease_expires_at (it completed without a live lease);
#   c) from the attempts alone (which also covers claims whose worker died
#      before writing exec_log): attempt k+1 of a task claimed before attempt
#      k's lease expired (started_at(k+1) < lease_expires_at(k), where the
#      lease is exec_log's lease_expires_at or else started_at(k) + lease;
#      workers never heartbeat, so that is exact).
use strict;
use warnings;

package FaultHarness;

use Exporter 'import';
use POSIX ();
use Time::HiRes qw(time sleep);
use IPC::Run ();
use List::Util qw(max min);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT_OK = qw(env_knob fault_node query try_query sqlstate_of
  run_amcheck wait_for task_invariants_sql parse_counts);

# SQLSTATEs a client of these tests may legitimately see: fenced calls of a
# worker that lost its lease (OR002 / OR003), and connection loss around
# kills and restarts.
my %EXPECTED_SQLSTATE = map { $_ => 1 }
  qw(OR002 OR003 57P01 57P02 57P03 08000 08001 08003 08006);

# ---------------------------------------------------------------------------
# Plain helpers
# ---------------------------------------------------------------------------

# env_knob(NAME, DEFAULT): a non-negative integer from the environment.
sub env_knob
{
	my ($name, $default) = @_;
	my $v = $ENV{$name};
	return $default unless defined $v && $v ne '';
	die "$name must be a non-negative integer, not '$v'\n"
	  unless $v =~ /^\d+$/;
	return $v + 0;
}

# fault_node(NAME, CONF): a started node for fault tests.  The TAP default
# restart_after_crash = off is turned on (a killed backend makes the
# postmaster restart all backends), and statement logging is off (the runs
# issue tens of thousands of statements).
sub fault_node
{
	my ($name, $conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', <<EOC . ($conf // ''));
restart_after_crash = on
log_statement = none
log_min_messages = warning
max_connections = 60
EOC
	$node->start;
	return $node;
}

# query(NODE, DB, SQL): the output (unaligned, tuples only); dies on error.
sub query
{
	my ($node, $db, $sql) = @_;
	return $node->safe_psql($db, $sql);
}

# try_query(NODE, DB, SQL): the output, or undef when it failed (e.g. while
# the server is down).
sub try_query
{
	my ($node, $db, $sql, $timeout) = @_;
	my ($out, $err, $timed_out) = ('', '', 0);
	my $rc = $node->psql(
		$db, $sql,
		stdout    => \$out,
		stderr    => \$err,
		timeout   => $timeout // 60,
		timed_out => \$timed_out);
	return undef if $rc != 0 || $timed_out;
	return $out;
}

# sqlstate_of(NODE, DB, SQL): 'ok' when SQL ran without error, else the
# SQLSTATE of its first error (from VERBOSITY verbose), or 'unknown: ...'.
sub sqlstate_of
{
	my ($node, $db, $sql) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql(
		$db, "\\set VERBOSITY verbose\n$sql",
		stdout => \$out,
		stderr => \$err);
	return 'ok' if $rc == 0;
	return $1 if $err =~ /(?:ERROR|FATAL):\s+([0-9A-Z]{5}):/;
	return "unknown: $err";
}

# wait_for(TIMEOUT, CODE): call CODE every 0.1 s until it returns true;
# false on timeout.
sub wait_for
{
	my ($timeout, $code) = @_;
	my $end = time + $timeout;
	while (time < $end)
	{
		return 1 if $code->();
		sleep 0.1;
	}
	return $code->() ? 1 : 0;
}

# run_amcheck(NODE, DB): one TAP test: pg_amcheck --heapallindexed
# --parent-check over every table and index of DB (the amcheck extension is
# installed when missing) exits 0 and reports nothing.
sub run_amcheck
{
	my ($node, $db) = @_;
	my ($out, $err) = ('', '');
	my @cmd = (
		'pg_amcheck', '--install-missing',
		'--heapallindexed', '--parent-check',
		'-h', $node->host, '-p', $node->port, '-U', scalar(getpwuid($<)),
		'-d', $db);
	my $ok = IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	ok($ok && $out eq '',
		"pg_amcheck --heapallindexed --parent-check on $db finds nothing")
	  or diag("pg_amcheck exit $?\nstdout: $out\nstderr: $err");
	return $ok;
}

# ---------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------

# FaultHarness->new(node => NODE, jobs => N, ...): a run.  Options:
#   db (postgres), queue (faults), workers (4), lease_seconds (2),
#   work_max (0.004 s of "work" at most per job), chunk (enqueues per
#   producer statement, 10), seed (srand; SOAK_SEED or time), label (for
#   the summary line), backlog (the producer waits while this many jobs are
#   claimable, 200).
sub new
{
	my ($class, %o) = @_;
	my $seed = $o{seed} // env_knob('SOAK_SEED', time % 100000);
	srand($seed);
	my $self = bless {
		node          => $o{node},
		db            => $o{db} // 'postgres',
		queue         => $o{queue} // 'faults',
		jobs          => $o{jobs} // 5000,
		workers       => $o{workers} // 4,
		lease_seconds => $o{lease_seconds} // 2,
		work_max      => $o{work_max} // 0.004,
		chunk         => $o{chunk} // 10,
		backlog       => $o{backlog} // 200,
		label         => $o{label} // 'faults',
		seed          => $seed,
		dir           => undef,
		procs         => {},    # pid => { key, role, name, started }
		slots         => {},    # key => { pid, dead_since, quick }
		gen           => 0,
		producer_next => 1,
		producer_done => 0,
		stopped       => 0,
		faults        => [],    # { kind, at, pending }
		exits         => 0,
	}, $class;
	# scripts and client logs, kept with the server logs
	$self->{dir} = "$PostgreSQL::Test::Utils::log_path/fault_$self->{label}";
	mkdir $self->{dir} or die "cannot create $self->{dir}: $!";
	note("fault run '$self->{label}': seed $seed, $self->{jobs} jobs, "
		  . "$self->{workers} workers, lease $self->{lease_seconds} s, dir $self->{dir}");
	return $self;
}

sub node  { return $_[0]->{node}; }
sub queue { return $_[0]->{queue}; }

# setup(): extension, queue (no retry delay, budgets that kills cannot
# exhaust), and the test-owned tables exec_log and complete_ack.
sub setup
{
	my ($self) = @_;
	my $q = $self->{queue};
	query($self->{node}, $self->{db}, <<EOS);
CREATE EXTENSION IF NOT EXISTS orchestrator;
SELECT orch_create_queue('$q', jsonb_build_object(
    'lease', '$self->{lease_seconds} seconds', 'initial_delay', 0,
    'max_attempts', 100000, 'max_failures', 100000));
CREATE TABLE exec_log (
    task_id          bigint NOT NULL,
    lease_token      uuid NOT NULL,
    worker           text NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    backend_pid      integer,
    started          timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX exec_log_task_idx ON exec_log (task_id);
CREATE TABLE complete_ack (
    task_id     bigint NOT NULL,
    lease_token uuid NOT NULL,
    worker      text NOT NULL,
    at          timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX complete_ack_task_idx ON complete_ack (task_id);
-- The producer waits while max_backlog jobs are claimable, so that it keeps
-- enqueueing through the whole run (and through the faults).
-- Paced by state, not by the clock: while faults are still to come, a
-- worker does not claim once the completions reach fh_gate.allowed (one
-- share past the next fault's mark; inject() moves it on after each fault
-- and lifts it after the last), so that however slowly a fault lands on a
-- busy machine, work is still pending when it does.
CREATE TABLE fh_gate (allowed bigint NOT NULL);
INSERT INTO fh_gate VALUES (9223372036854775807);
CREATE FUNCTION fh_gate_wait(q text) RETURNS void
LANGUAGE plpgsql AS \$\$
BEGIN
    WHILE (SELECT count(*) FROM orch.tasks WHERE queue = q AND state = 'completed')
          >= (SELECT allowed FROM fh_gate) LOOP
        PERFORM pg_sleep(0.02);
    END LOOP;
END \$\$;
CREATE FUNCTION fh_backlog_wait(q text, max_backlog int) RETURNS void
LANGUAGE plpgsql AS \$\$
BEGIN
    WHILE (SELECT count(*) FROM (SELECT 1 FROM orch.tasks
            WHERE queue = q AND ready_at IS NOT NULL LIMIT max_backlog) s) >= max_backlog LOOP
        PERFORM pg_sleep(0.02);
    END LOOP;
END \$\$;
EOS
	$self->_write_scripts;
	return;
}

sub _write_file
{
	my ($path, $text) = @_;
	open my $fh, '>', $path or die "cannot write $path: $!";
	print $fh $text;
	close $fh or die "cannot write $path: $!";
	return;
}

sub _write_scripts
{
	my ($self) = @_;
	my $iter = <<'EOS';
\unset tid
\unset done
SELECT fh_gate_wait(:'queue');
SELECT d.task_id AS tid, d.lease_token AS tok, d.lease_expires_at AS lexp
  FROM (SELECT 1) one
  LEFT JOIN LATERAL orch_dequeue(:'queue', :'worker', 1, :'lease') d ON true \gset
\if :{?tid}
INSERT INTO exec_log (task_id, lease_token, worker, lease_expires_at, backend_pid)
  VALUES (:tid, :'tok', :'worker', :'lexp', pg_backend_pid());
SELECT pg_sleep(random() * :work_max);
SELECT orch_complete(:tid, :'tok', jsonb_build_object('worker', :'worker')) AS done \gset
\if :{?done}
INSERT INTO complete_ack (task_id, lease_token, worker) VALUES (:tid, :'tok', :'worker');
\endif
\else
SELECT pg_sleep(0.05);
\endif
EOS
	my $head = "\\set VERBOSITY verbose\n\\set SHOW_CONTEXT never\n";
	_write_file("$self->{dir}/worker.sql", $head . ($iter x 250));
	_write_file("$self->{dir}/maintainer.sql",
		$head
		  . ("SELECT count(*) FROM orch_maintain(500);\nSELECT pg_sleep(0.2);\n"
			  x 500));
	return;
}

# The producer's script from job $from to the last one.
sub _write_producer
{
	my ($self, $from) = @_;
	my $q    = $self->{queue};
	my $text = "\\set VERBOSITY verbose\n\\set SHOW_CONTEXT never\n";
	for (my $a = $from; $a <= $self->{jobs}; $a += $self->{chunk})
	{
		my $b = min($a + $self->{chunk} - 1, $self->{jobs});
		$text .= "DO \$\$ BEGIN PERFORM fh_backlog_wait('$q', $self->{backlog}); END \$\$;\n";
		$text .=
		    "SELECT k, orch_enqueue('$q', jsonb_build_object('n', k), "
		  . "idempotency_key => 'job-' || k) FROM generate_series($a, $b) k;\n";
	}
	my $path = "$self->{dir}/producer.sql";
	_write_file($path, $text);
	return $path;
}

# ---------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------

# Start one psql process (fork + exec; stdin /dev/null, stdout to $stdout,
# stderr appended to the role's log).
sub _spawn
{
	my ($self, $key, $role, $script, $stdout, @psql_opts) = @_;
	my $name = sprintf('%s-%d', $key, ++$self->{gen});
	my $conn = $self->{node}->connstr($self->{db}) . " application_name=orch_$name";
	my @cmd  = (
		'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=0', @psql_opts,
		'-v', "queue=$self->{queue}",
		'-v', "worker=$name",
		'-v', "lease=$self->{lease_seconds} seconds",
		'-v', "work_max=$self->{work_max}",
		'-d', $conn, '-f', $script);
	my $log = "$self->{dir}/$role.log";
	my $pid = fork();
	die "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		# child: never return into the test (no END blocks)
		open(my $in,  '<',  '/dev/null');
		open(my $out, '>>', $stdout // '/dev/null');
		open(my $err, '>>', $log);
		POSIX::dup2(fileno($in),  0);
		POSIX::dup2(fileno($out), 1);
		POSIX::dup2(fileno($err), 2);
		{ no warnings 'exec'; exec { $cmd[0] } @cmd; }
		POSIX::_exit(127);
	}
	$self->{procs}{$pid} = { key => $key, role => $role, name => $name, started => time };
	$self->{slots}{$key}{pid} = $pid;
	return $pid;
}

sub _acks
{
	my ($self) = @_;
	my %ack;
	my $path = "$self->{dir}/acks.txt";
	$self->{ack_conflicts} = 0;
	return \%ack unless -e $path;
	open my $fh, '<', $path or die "cannot read $path: $!";
	while (my $l = <$fh>)
	{
		next unless $l =~ /^(\d+)\|(\d+)$/;
		# one job acknowledged twice must have the same task id
		$self->{ack_conflicts}++ if defined $ack{$1} && $ack{$1} != $2;
		$ack{$1} = $2;
	}
	close $fh;
	return \%ack;
}

sub _spawn_producer
{
	my ($self) = @_;
	my $acks = $self->_acks;
	my $next = 1;
	$next = max(keys %$acks) + 1 if %$acks;
	$self->{producer_next} = $next;
	if ($next > $self->{jobs})
	{
		$self->{producer_done} = 1;
		return;
	}
	my $script = $self->_write_producer($next);
	$self->_spawn('producer', 'producer', $script, "$self->{dir}/acks.txt",
		'-A', '-t', '-F', '|');
	return;
}

# tick(): reap exited processes and start what is missing.  A process that
# died within 0.5 s of its start (e.g. the server is down) is restarted
# after 0.3 s, any other at once.
sub tick
{
	my ($self) = @_;
	my $now = time;
	for my $pid (keys %{ $self->{procs} })
	{
		my $r = waitpid($pid, POSIX::WNOHANG());
		next if $r == 0;
		my $status = $?;
		my $p      = delete $self->{procs}{$pid};
		my $slot   = $self->{slots}{ $p->{key} };
		$slot->{pid}        = undef;
		$slot->{dead_since} = $now;
		$slot->{quick}      = ($now - $p->{started}) < 0.5;
		$self->{exits}++;
		if ($p->{role} eq 'producer')
		{
			# exit 0: the script ran to its end, every chunk was sent
			if ($status == 0) { $self->{producer_done} = 1; }
			else              { $self->{producer_restarts}++; }
		}
	}
	return if $self->{stopped};
	my @keys = ((map { "w$_" } 1 .. $self->{workers}), 'maintainer');
	push @keys, 'producer' unless $self->{producer_done};
	for my $key (@keys)
	{
		my $slot = $self->{slots}{$key} //= {};
		next if defined $slot->{pid};
		next
		  if defined $slot->{dead_since}
		  && $slot->{quick}
		  && $now - $slot->{dead_since} < 0.3;
		if ($key eq 'producer') { $self->_spawn_producer; }
		elsif ($key eq 'maintainer')
		{
			$self->_spawn($key, 'maintainer', "$self->{dir}/maintainer.sql");
		}
		else { $self->_spawn($key, 'worker', "$self->{dir}/worker.sql"); }
	}
	return;
}

# sleep for $secs while keeping the processes going
sub nap
{
	my ($self, $secs) = @_;
	my $end = time + $secs;
	while (1)
	{
		$self->tick;
		my $left = $end - time;
		last if $left <= 0;
		sleep(min($left, 0.02));
	}
	return;
}

# Live worker pids.
sub worker_pids
{
	my ($self) = @_;
	return map { $_->{pid} }
	  grep { defined $_->{pid} }
	  map  { $self->{slots}{"w$_"} // {} } 1 .. $self->{workers};
}

# (completed, total) tasks of the queue, or () when the server is not there.
sub progress
{
	my ($self) = @_;
	my $out = try_query($self->{node}, $self->{db},
		"SELECT count(*) FILTER (WHERE state = 'completed') || '|' || count(*)"
		  . " FROM orch.tasks WHERE queue = '$self->{queue}'", 30);
	return () unless defined $out && $out =~ /^(\d+)\|(\d+)$/;
	return ($1, $2);
}

sub start
{
	my ($self) = @_;
	$self->{t0} = time;
	$self->tick;
	return;
}

# inject([[KIND, CODE], ...]): run each fault callback in order, the i-th
# (from 1) once i * jobs / (faults + 2) jobs have completed, plus a random
# 0..max_jitter s.  Records the pending jobs at each fault.
sub inject
{
	my ($self, $faults, %o) = @_;
	my $n      = scalar @$faults;
	my $share  = max(1, int($self->{jobs} / ($n + 2)));
	my $jitter = $o{max_jitter} // 0.15;
	my $wait   = $o{timeout} // 120;
	# the gate: completions stop one share past the next fault's mark
	$self->_gate(2 * $share);
	for my $i (0 .. $n - 1)
	{
		my ($kind, $code) = @{ $faults->[$i] };
		my $target = ($i + 1) * $share;
		my $end    = time + $wait;
		my $done;
		while (1)
		{
			$self->tick;
			my ($c) = $self->progress;
			if (defined $c && $c >= $target) { $done = $c; last; }
			if (time > $end)
			{
				fail("fault $i ($kind): $target completions reached within ${wait}s")
				  or diag("only " . ($c // 'unknown') . " completed");
				return 0;
			}
			$self->nap(0.05);
		}
		$self->nap(rand($jitter));
		my ($c) = $self->progress;
		$c //= $done;
		push @{ $self->{faults} },
		  { kind => $kind, at => time - $self->{t0}, pending => $self->{jobs} - $c };
		$code->($self);
		$self->_gate($i == $n - 1 ? undef : ($i + 3) * $share);
	}
	note(sprintf('%d faults injected in %.1f s', $n, time - $self->{t0}));
	return 1;
}

# _gate(N): let the workers complete up to N jobs (undef: no limit); waits
# for the server to take it (it may be restarting after a fault).
sub _gate
{
	my ($self, $allowed) = @_;
	my $v = defined $allowed ? $allowed : '9223372036854775807';
	my $ok = wait_for(120, sub {
		$self->tick;
		defined try_query($self->{node}, $self->{db}, "UPDATE fh_gate SET allowed = $v RETURNING 1", 10);
	});
	fail("fault gate set to $v") unless $ok;
	return;
}

# drain(TIMEOUT): keep going until the producer finished and all jobs are
# completed; then stop every process.  False on timeout.
sub drain
{
	my ($self, $timeout) = @_;
	my $end = time + $timeout;
	my ($c, $t);
	while (time < $end)
	{
		$self->tick;
		($c, $t) = $self->progress;
		last
		  if $self->{producer_done}
		  && defined $c
		  && $c >= $self->{jobs};
		$self->nap(0.1);
	}
	$self->{elapsed} = time - $self->{t0};
	$self->stop_all;
	my $ok = $self->{producer_done} && defined $c && $c >= $self->{jobs};
	ok($ok, "the run drained: all $self->{jobs} jobs completed within ${timeout}s")
	  or diag("completed " . ($c // '?') . " of " . ($t // '?')
		  . " tasks; producer " . ($self->{producer_done} ? 'done' : 'not done'));
	return $ok;
}

sub stop_all
{
	my ($self) = @_;
	$self->{stopped} = 1;
	kill 'TERM', $_ for keys %{ $self->{procs} };
	my $end = time + 10;
	while (%{ $self->{procs} } && time < $end)
	{
		$self->tick;
		sleep 0.05;
	}
	kill 'KILL', $_ for keys %{ $self->{procs} };
	while (%{ $self->{procs} })
	{
		$self->tick;
		sleep 0.05;
	}
	return;
}

# kill -9 one live worker process (the psql client); returns its pid.
sub kill_random_worker
{
	my ($self) = @_;
	for (1 .. 100)
	{
		my @pids = $self->worker_pids;
		if (@pids)
		{
			my $pid = $pids[ int(rand(@pids)) ];
			if (kill('KILL', $pid))
			{
				$self->{worker_kills}++;
				return $pid;
			}
		}
		$self->nap(0.02);
	}
	fail('found a live worker process to kill');
	return undef;
}

# kill -9 the server backend of a random worker (found by its
# application_name; preferring one that is running a statement); the
# postmaster then restarts all backends.  Waits until the server log shows
# the reinitialization (a backend that exited just before the signal makes
# no crash: then another one is chosen) and the server accepts connections
# again.  Returns the backend pid.
sub kill_random_backend
{
	my ($self) = @_;
	my $logfile = $self->{node}->logfile;
	my $reinits = sub {
		my $log = slurp_file($logfile);
		my $n = () = $log =~ /all server processes terminated; reinitializing/g;
		return $n;
	};
	my $before = $reinits->();
	my $pid;
	for my $try (1 .. 200)
	{
		$pid = try_query($self->{node}, $self->{db},
			"SELECT pid FROM pg_stat_activity"
			  . " WHERE application_name LIKE 'orch\\_w%' AND pid <> pg_backend_pid()"
			  . " ORDER BY state = 'active' DESC, random() LIMIT 1", 30);
		if (defined $pid && $pid =~ /^\d+$/ && kill('KILL', $pid))
		{
			last if wait_for(15, sub { $self->tick; $reinits->() > $before });
			note("kill -9 of backend $pid caused no restart (it had exited); choosing another");
		}
		$pid = undef;
		$self->nap(0.02);
	}
	if (!defined $pid)
	{
		fail('killed a worker backend and the postmaster reinitialized');
		return undef;
	}
	$self->{backend_kills}++;
	my $back = wait_for(60,
		sub { $self->tick; defined try_query($self->{node}, $self->{db}, 'SELECT 1', 10) });
	fail("server accepts connections again after kill -9 of backend $pid") unless $back;
	return $pid;
}

# stop the server with mode immediate (no shutdown checkpoint; the workers
# lose their connections mid-statement), wait a moment, start it again.
sub restart_immediate
{
	my ($self) = @_;
	$self->{node}->stop('immediate');
	$self->nap(0.3);
	$self->{node}->start;
	$self->{restarts}++;
	return;
}

# ---------------------------------------------------------------------------
# Verification
# ---------------------------------------------------------------------------

# task_invariants_sql(LEASE): the per-task checks shared by the queue soaks
# and the workflow kill test, as "UNION ALL SELECT name, count" lines over the
# temp tables qt (the tasks), qa (their attempts), qe (their events), exec_log
# and complete_ack.  LEASE (an SQL interval) bounds an attempt that logged no
# execution.  Each count must be 0 (executions: at least the tasks).
# The rolling counters of queue Q against the history they were folded
# from (qt, qa, qe: the queue's tasks, attempts and events), each the sum of
# the differences: the folds ran while workers, producer and server were
# killed, so every enqueue, claim, completion and attempt must be counted
# exactly once, none from a transaction the crash rolled back.
sub metrics_invariants_sql
{
	my ($q) = @_;
	return <<EOS;
UNION ALL SELECT 'metric_enqueued_off', abs(coalesce((SELECT sum(value) FROM orch.metric_totals
     WHERE queue = '$q' AND metric = 'enqueued'), 0) - (SELECT count(*) FROM qt))
UNION ALL SELECT 'metric_started_off', abs(coalesce((SELECT sum(value) FROM orch.metric_totals
     WHERE queue = '$q' AND metric = 'started'), 0) - (SELECT count(*) FROM qe WHERE to_state = 'executing'))
UNION ALL SELECT 'metric_completed_off', abs(coalesce((SELECT sum(value) FROM orch.metric_totals
     WHERE queue = '$q' AND metric = 'finished' AND l1 = 'completed'), 0)
     - (SELECT count(*) FROM qt WHERE state = 'completed'))
UNION ALL SELECT 'metric_attempts_off', coalesce(sum(abs(coalesce(m.value, 0) - coalesce(h.n, 0))), 0)
  FROM (SELECT l1 AS outcome, value FROM orch.metric_totals WHERE queue = '$q' AND metric = 'attempt') m
  FULL JOIN (SELECT outcome, count(*) AS n FROM qa GROUP BY 1) h ON h.outcome = m.outcome
EOS
}

sub task_invariants_sql
{
	my ($lease_iv) = @_;
	return <<EOS;
UNION ALL SELECT 'executions', count(*) FROM exec_log
UNION ALL SELECT 'executions_unaccounted', count(*) FROM exec_log l
   WHERE (SELECT count(*) FROM qa WHERE qa.task_id = l.task_id AND qa.lease_token = l.lease_token) <> 1
UNION ALL SELECT 'overlap_live', count(*) FROM
   (SELECT l.task_id, l.lease_token, l.started,
           CASE WHEN qa.outcome = 'completed' THEN least(qa.finished_at, l.lease_expires_at)
                ELSE l.lease_expires_at END AS live_end
      FROM exec_log l LEFT JOIN qa ON qa.task_id = l.task_id AND qa.lease_token = l.lease_token) x
   JOIN
   (SELECT l.task_id, l.lease_token, l.started,
           CASE WHEN qa.outcome = 'completed' THEN least(qa.finished_at, l.lease_expires_at)
                ELSE l.lease_expires_at END AS live_end
      FROM exec_log l LEFT JOIN qa ON qa.task_id = l.task_id AND qa.lease_token = l.lease_token) y
     ON y.task_id = x.task_id AND x.lease_token < y.lease_token
   WHERE x.started < x.live_end AND y.started < y.live_end
     AND x.started < y.live_end AND y.started < x.live_end
UNION ALL SELECT 'completed_after_lease', count(*) FROM qa
   JOIN exec_log l ON l.task_id = qa.task_id AND l.lease_token = qa.lease_token
   WHERE qa.outcome = 'completed' AND qa.finished_at >= l.lease_expires_at
UNION ALL SELECT 'claimed_during_live_lease', count(*) FROM qa a
   JOIN qa b ON b.task_id = a.task_id AND b.attempt = a.attempt + 1
   LEFT JOIN exec_log l ON l.task_id = a.task_id AND l.lease_token = a.lease_token
   WHERE b.started_at < coalesce(l.lease_expires_at, a.started_at + $lease_iv)
UNION ALL SELECT 'event_chain_broken', count(DISTINCT task_id) FROM
   (SELECT task_id, from_state, to_state,
           lag(to_state) OVER w AS prev, row_number() OVER w AS rn
      FROM qe WINDOW w AS (PARTITION BY task_id ORDER BY id)) s
   WHERE (rn = 1 AND (from_state IS DISTINCT FROM 'received' OR to_state <> 'queued'))
      OR (rn > 1 AND from_state IS DISTINCT FROM prev)
UNION ALL SELECT 'last_event_not_state', count(*) FROM qt
   WHERE qt.state IS DISTINCT FROM
         (SELECT to_state FROM qe WHERE qe.task_id = qt.id ORDER BY qe.id DESC LIMIT 1)
UNION ALL SELECT 'claim_events_not_attempts', count(*) FROM qt
   WHERE qt.attempts <> (SELECT count(*) FROM qe WHERE qe.task_id = qt.id AND qe.to_state = 'executing')
UNION ALL SELECT 'terminal_events_not_1', count(*) FROM qt
   WHERE (SELECT count(*) FROM qe WHERE qe.task_id = qt.id
           AND qe.to_state IN ('completed', 'failed', 'cancelled')) <> 1
UNION ALL SELECT 'completed_attempts_not_1', count(*) FROM qt
   WHERE (SELECT count(*) FROM qa WHERE qa.task_id = qt.id AND qa.outcome = 'completed') <> 1
UNION ALL SELECT 'ack_not_completing', count(*) FROM complete_ack c
   WHERE NOT EXISTS (SELECT 1 FROM qa WHERE qa.task_id = c.task_id
                       AND qa.lease_token = c.lease_token AND qa.outcome = 'completed')
EOS
}

# parse_counts(OUT): { name => count } from psql's "name|count" lines.
sub parse_counts
{
	my ($out) = @_;
	my %c;
	for my $l (split /\n/, $out)
	{
		$c{$1} = $2 if $l =~ /^(\w+)\|(\d+)$/;
	}
	return \%c;
}

sub _counts
{
	my ($self) = @_;
	my $q     = $self->{queue};
	my $n     = $self->{jobs};
	my $lease = "interval '$self->{lease_seconds} seconds'";
	my $acks  = $self->_acks;
	my $ack_values =
	  join(',', map { "($_, $acks->{$_})" } sort { $a <=> $b } keys %$acks);
	$ack_values = '(NULL::int, NULL::bigint)' if $ack_values eq '';

	# (the metrics folded once more, after a fold still running in the
	# maintainer's backend, if any: it holds the fold's state row)
	my $sql = <<EOS . task_invariants_sql($lease) . metrics_invariants_sql($q);
SELECT 1 FROM orch.metric_state FOR UPDATE;
SELECT orch.metrics_fold() >= 0;
CREATE TEMP TABLE acked (n int, task_id bigint);
INSERT INTO acked VALUES $ack_values;
DELETE FROM acked WHERE n IS NULL;
CREATE TEMP TABLE qt AS SELECT * FROM orch.tasks WHERE queue = '$q';
CREATE TEMP TABLE qa AS SELECT a.* FROM orch.attempt_history a JOIN qt ON qt.id = a.task_id;
CREATE TEMP TABLE qe AS SELECT e.* FROM orch.history e JOIN qt ON qt.id = e.task_id;
CREATE INDEX ON qt (id); CREATE INDEX ON qt (idempotency_key);
CREATE INDEX ON qa (task_id); CREATE INDEX ON qe (task_id);
CREATE INDEX ON acked (task_id);
ANALYZE qt; ANALYZE qa; ANALYZE qe;
SELECT 'tasks', count(*) FROM qt
UNION ALL SELECT 'completed', count(*) FROM qt WHERE state = 'completed'
UNION ALL SELECT 'not_completed', count(*) FROM qt WHERE state <> 'completed'
UNION ALL SELECT 'lost', count(*) FROM generate_series(1, $n) k
   WHERE NOT EXISTS (SELECT 1 FROM qt WHERE qt.idempotency_key = 'job-' || k
                       AND qt.payload = jsonb_build_object('n', k) AND qt.state = 'completed')
UNION ALL SELECT 'duplicate_jobs', count(*) FROM
   (SELECT idempotency_key FROM qt GROUP BY 1 HAVING count(*) > 1) d
UNION ALL SELECT 'foreign_tasks', count(*) FROM qt
   WHERE idempotency_key IS NULL OR payload <> jsonb_build_object('n', substr(idempotency_key, 5)::int)
      OR substr(idempotency_key, 5)::int NOT BETWEEN 1 AND $n
UNION ALL SELECT 'acked', count(*) FROM acked
UNION ALL SELECT 'acked_lost', count(*) FROM acked a
   WHERE NOT EXISTS (SELECT 1 FROM qt WHERE qt.id = a.task_id AND qt.state = 'completed'
                       AND qt.idempotency_key = 'job-' || a.n AND qt.payload = jsonb_build_object('n', a.n))
UNION ALL SELECT 'completed_events_not_1', count(*) FROM qt
   WHERE (SELECT count(*) FROM qe WHERE qe.task_id = qt.id AND qe.to_state = 'completed') <> 1
UNION ALL SELECT 'double_completed', count(*) FROM qt
   WHERE (SELECT count(*) FROM qa WHERE qa.task_id = qt.id AND qa.outcome = 'completed') > 1
      OR (SELECT count(*) FROM qe WHERE qe.task_id = qt.id AND qe.to_state = 'completed') > 1
      OR (SELECT count(DISTINCT c.lease_token) FROM complete_ack c WHERE c.task_id = qt.id) > 1
UNION ALL SELECT 'completing_token_not_current', count(*) FROM qt
   JOIN qa ON qa.task_id = qt.id AND qa.outcome = 'completed'
   WHERE qa.attempt <> qt.attempts
      OR (qt.lease_token IS NOT NULL AND qa.lease_token IS DISTINCT FROM qt.lease_token)
UNION ALL SELECT 'token_reuse', count(*) - count(DISTINCT lease_token) FROM qa
UNION ALL SELECT 'attempt_sequence_bad', count(*) FROM qt
   WHERE qt.attempts <> (SELECT count(*) FROM qa WHERE qa.task_id = qt.id)
      OR qt.attempts <> (SELECT count(DISTINCT attempt) FROM qa WHERE qa.task_id = qt.id)
      OR qt.attempts <> coalesce((SELECT max(attempt) FROM qa WHERE qa.task_id = qt.id), 0)
      OR qt.failures <> (SELECT count(*) FROM qa WHERE qa.task_id = qt.id AND qa.outcome = 'lease_expired')
      OR EXISTS (SELECT 1 FROM qa WHERE qa.task_id = qt.id AND qa.attempt < qt.attempts
                   AND qa.outcome <> 'lease_expired')
UNION ALL SELECT 'lease_expired_attempts', count(*) FROM qa WHERE outcome = 'lease_expired'
EOS
	return parse_counts(query($self->{node}, $self->{db}, $sql));
}

# Errors and warnings the clients printed: { sqlstate => count }, and the
# orch_maintain counter-mismatch warnings.
sub _client_errors
{
	my ($self) = @_;
	my (%codes, $mismatch_warnings);
	$mismatch_warnings = 0;
	for my $role (qw(worker producer maintainer))
	{
		my $path = "$self->{dir}/$role.log";
		next unless -e $path;
		open my $fh, '<', $path or die "cannot read $path: $!";
		while (my $l = <$fh>)
		{
			$codes{"$role:$1"}++ if $l =~ /(?:ERROR|FATAL):\s+([0-9A-Z]{5}):/;
			$mismatch_warnings++ if $l =~ /WARNING:.*counters that disagree/;
		}
		close $fh;
	}
	return (\%codes, $mismatch_warnings);
}

# check_invariants(): the pass criteria (see the top of this file), one TAP
# test each.  Returns the counts (for the summary line).
sub check_invariants
{
	my ($self) = @_;
	my $c = $self->_counts;
	my $n = $self->{jobs};
	my $z = sub {
		my ($key, $what) = @_;
		is($c->{$key} // 'missing', 0, $what) or diag("$key = " . ($c->{$key} // 'missing'));
	};

	is($c->{tasks}, $n, "exactly $n tasks in the queue (one per job)");
	is($c->{completed}, $n, "all $n tasks completed");
	$z->('not_completed', 'no task ended in another state');
	$z->('lost', 'no job lost (each job 1..N has a completed task with its payload)');
	$z->('duplicate_jobs', 'no job enqueued twice');
	$z->('foreign_tasks', 'no task that is not one of the jobs');
	cmp_ok($c->{acked}, '>', 0, 'the producer acknowledged enqueues');
	$z->('acked_lost',
		'every acknowledged enqueue survived and completed under its acknowledged id');
	is($self->{ack_conflicts}, 0, 'no job was acknowledged with two different task ids');
	$z->('completed_attempts_not_1', "one 'completed' attempt row per task");
	$z->('completed_events_not_1', 'one -> completed event per task');
	$z->('terminal_events_not_1', 'one terminal event per task (terminal exactly once)');
	$z->('double_completed', 'no task completed twice');
	$z->('ack_not_completing',
		'every completion acknowledged to a worker is the recorded completion');
	$z->('completing_token_not_current',
		"the completing attempt is the task's last claim (and its token the task's last)");
	$z->('token_reuse', 'every claim had its own lease token');
	cmp_ok($c->{executions}, '>=', $n, 'executions were logged');
	$z->('executions_unaccounted',
		'every logged execution has exactly one attempt row (no claim vanished)');
	$z->('attempt_sequence_bad',
		'attempt rows are 1..attempts, failures = lease_expired attempts, only the last attempt completed');
	$z->('overlap_live', 'no two executions of a task with live leases overlap in time');
	$z->('completed_after_lease', 'every accepted execution completed within its lease');
	$z->('claimed_during_live_lease', 'no task was claimed again while a lease on it was live');
	$z->('event_chain_broken', 'every task\'s events form one chain from received -> queued');
	$z->('last_event_not_state', "every task's last event is its state");
	$z->('claim_events_not_attempts', 'one -> executing event per attempt');
	$z->('metric_enqueued_off', 'the folded enqueued counter is the number of tasks');
	$z->('metric_started_off', 'the folded started counter is the number of claims in the history');
	$z->('metric_completed_off', 'the folded completed counter is the number of completed tasks');
	$z->('metric_attempts_off', 'the folded attempt counters are the attempts by outcome');

	my ($codes, $mismatch) = $self->_client_errors;
	my @bad = grep { my ($code) = /:(\w+)$/; !$EXPECTED_SQLSTATE{$code} } sort keys %$codes;
	is(scalar(@bad), 0,
		'clients saw no unexpected SQLSTATE (only lease/terminal fencing and connection loss)')
	  or diag('unexpected: ' . join(', ', map { "$_ x$codes->{$_}" } @bad)
		  . "\n(logs in $self->{dir})");
	is($mismatch, 0, 'orch_maintain never reported counter mismatches');
	note('client errors: '
		  . (join(', ', map { "$_ x$codes->{$_}" } sort keys %$codes) || 'none'));

	my @late = grep { $_->{pending} <= 0 } @{ $self->{faults} };
	is(scalar(@late), 0, 'every fault was injected while jobs were pending');

	$c->{overlaps} =
	  ($c->{overlap_live} // 0) + ($c->{completed_after_lease} // 0)
	  + ($c->{claimed_during_live_lease} // 0);
	$c->{codes} = $codes;
	$self->{counts} = $c;
	return $c;
}

# summary(EXTRA): one line with the counts (test/soak.sh prints it).
sub summary
{
	my ($self, %extra) = @_;
	my $c = $self->{counts} // {};
	my @f = (
		"test=$self->{label}",
		"seed=$self->{seed}",
		"jobs=$self->{jobs}",
		'completed=' . ($c->{completed} // '?'),
		'lost=' . ($c->{lost} // '?'),
		'double_completed=' . ($c->{double_completed} // '?'),
		'overlaps=' . ($c->{overlaps} // '?'),
		'acked=' . ($c->{acked} // '?'),
		'executions=' . ($c->{executions} // '?'),
		'lease_expired=' . ($c->{lease_expired_attempts} // '?'),
		'producer_restarts=' . ($self->{producer_restarts} // 0),
		(map { "$_=$extra{$_}" } sort keys %extra),
		sprintf('elapsed=%.1fs', $self->{elapsed} // 0));
	my $line = 'FAULT-SUMMARY ' . join(' ', @f);
	diag($line);
	return $line;
}

1;
