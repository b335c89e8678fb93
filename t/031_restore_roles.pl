# t/031_restore_roles.pl: tenant bindings survive a dump restored into
# another cluster, and fail closed when the roles are not there.
#
# Cluster src binds three roles: rr_worker_a to tenant ta, rr_reader_b to tb,
# and rr_old_name to ta, which is then renamed rr_renamed (the binding
# follows the role; the next bind call records the new name, so that the
# dump names it as it is called now).  Its database is dumped with pg_dump
# -Fc, the roles with pg_dumpall --globals-only.
#
# Into cluster bare (another system identifier, none of the roles): the
# restore succeeds without an error and keeps every binding by name
# (0.7.0 kept a regrole, whose COPY failed without the roles: the restore
# reported an error and left no binding, so every role created later was
# unrestricted).  A role created afterwards with a bound name is bound at
# once (fail closed); a role of another name is unrestricted; the first
# bind call re-keys the restored bindings to this cluster's roles (and a
# rename afterwards keeps them).
#
# Into cluster full, globals first (the documented way): every role is
# bound as in src, the renamed one under its new name.
#
# And in src itself: a role renamed keeps its bindings; a dropped role's
# binding does not pass to a new role of the same name, and the next bind
# or unbind call removes it (audited), so that no dump carries it.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run ();

sub client
{
	my (@cmd) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	return ($ok, $out, $err);
}

my $src = PostgreSQL::Test::Cluster->new('rr_src');
$src->init;
$src->start;
my @src_conn = ('-h', $src->host, '-p', $src->port);

# ---------------------------------------------------------------------------
# 1. src: tasks of ta and tb, three bound roles, one renamed
# ---------------------------------------------------------------------------
$src->safe_psql('postgres', 'CREATE DATABASE app');
$src->safe_psql('app', q{
CREATE EXTENSION orchestrator;
SELECT orch_create_queue('q');
SELECT orch_enqueue('q', '{"t": "a"}', tenant => 'ta');
SELECT orch_enqueue('q', '{"t": "a"}', tenant => 'ta');
SELECT orch_enqueue('q', '{"t": "b"}', tenant => 'tb');
CREATE ROLE rr_worker_a LOGIN;
CREATE ROLE rr_reader_b LOGIN;
CREATE ROLE rr_old_name LOGIN;
GRANT orch_worker TO rr_worker_a, rr_old_name;
GRANT orch_reader TO rr_reader_b;
SELECT orch_bind_tenant('rr_worker_a', 'ta');
SELECT orch_bind_tenant('rr_reader_b', 'tb');
SELECT orch_bind_tenant('rr_old_name', 'ta');
});

# visible(node, db, role): "tenants|tasks it sees" for a session set to role
sub visible
{
	my ($node, $db, $role) = @_;
	return $node->safe_psql($db,
		qq{SET ROLE "$role"; SELECT coalesce(orch_caller_tenants()::text, 'all') || '|'
		   || (SELECT string_agg(payload->>'t', ',' ORDER BY payload->>'t') FROM orch_tasks)});
}

is(visible($src, 'app', 'rr_worker_a'), '{ta}|a,a', 'src: rr_worker_a sees ta');
is(visible($src, 'app', 'rr_reader_b'), '{tb}|b', 'src: rr_reader_b sees tb');

$src->safe_psql('app', 'ALTER ROLE rr_old_name RENAME TO rr_renamed');
is(visible($src, 'app', 'rr_renamed'), '{ta}|a,a', 'src: a renamed role keeps its binding (by OID)');
is($src->safe_psql('app', q{SELECT orch_bind_tenant('rr_reader_b', 'tb')}), 'f',
	'src: binding again returns false (and brings the names up to date)');
is( $src->safe_psql('app', q{SELECT string_agg(role || '@' || tenant_id, ',' ORDER BY role) FROM orch.tenant_bindings}),
	'rr_reader_b@tb,rr_renamed@ta,rr_worker_a@ta',
	"src: the renamed role's binding now carries its new name");
is( $src->safe_psql('app', q{SELECT string_agg(role || '@' || tenant_id, ',' ORDER BY role) FROM orch_tenant_bindings}),
	'rr_reader_b@tb,rr_renamed@ta,rr_worker_a@ta',
	'src: orch_tenant_bindings shows the current names');

# a dropped role's binding stays with it: a new role of that name is not bound
$src->safe_psql('app', q{CREATE ROLE rr_gone; SELECT orch_bind_tenant('rr_gone', 'tb')});
$src->safe_psql('app', q{DROP ROLE rr_gone; CREATE ROLE rr_gone; GRANT orch_reader TO rr_gone});
is(visible($src, 'app', 'rr_gone'), 'all|a,a,b',
	"src: a new role with a dropped role's name does not inherit its binding");
is($src->safe_psql('app', q{SELECT orch_bind_tenant('rr_gone', 'ta')}), 't',
	'src: binding the new role is a new binding');
is(visible($src, 'app', 'rr_gone'), '{ta}|a,a', 'src: ... and it is bound to ta only');
is( $src->safe_psql('app',
		q{SELECT string_agg(tenant_id || ':' || note, ',') FROM orch.history
		   WHERE entity = 'tenant_binding' AND reason_code = 'tenant_unbound' AND from_state = 'rr_gone'}),
	'tb:role dropped',
	"src: that call removed the dropped role's binding, audited as unbound");
$src->safe_psql('app', q{DROP ROLE rr_gone});
is($src->safe_psql('app', q{SELECT orch_unbind_tenant('rr_worker_a', 'tz')}), 'f',
	'src: an unbind call (of nothing) ...');
is($src->safe_psql('app', q{SELECT count(*) FROM orch.tenant_bindings WHERE role = 'rr_gone'}), '0',
	'src: ... removes the bindings of the role dropped since, so that no dump carries them');

# ---------------------------------------------------------------------------
# 2. Dump the database and the roles
# ---------------------------------------------------------------------------
my $tmp = PostgreSQL::Test::Utils::tempdir;
my $dumpfile = "$tmp/app.dump";
my $globals = "$tmp/globals.sql";
my ($ok, $out, $err) = client('pg_dump', @src_conn, '-Fc', '-f', $dumpfile, 'app');
ok($ok && $err !~ /ERROR|WARNING/, 'pg_dump -Fc app') or diag($err);
($ok, $out, $err) = client('pg_dumpall', @src_conn, '--globals-only', '-f', $globals);
ok($ok, 'pg_dumpall --globals-only') or diag($err);

# ---------------------------------------------------------------------------
# 3. Into a cluster without the roles
# ---------------------------------------------------------------------------
my $bare = PostgreSQL::Test::Cluster->new('rr_bare');
$bare->init;
$bare->start;
my @bare_conn = ('-h', $bare->host, '-p', $bare->port);
isnt( $bare->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'),
	$src->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'),
	'bare: another cluster (another system identifier)');
($ok, $out, $err) = client('createdb', @bare_conn, 'app');
ok($ok, 'bare: createdb app') or diag($err);
($ok, $out, $err) = client('pg_restore', @bare_conn, '-d', 'app', $dumpfile);
ok($ok, 'bare: pg_restore exits 0 although the bound roles do not exist') or diag("$out\n$err");
unlike("$out\n$err", qr/ERROR|errors ignored/, 'bare: pg_restore reports no error');
is( $bare->safe_psql('app', q{SELECT string_agg(role || '@' || tenant_id, ',' ORDER BY role) FROM orch_tenant_bindings}),
	'rr_reader_b@tb,rr_renamed@ta,rr_worker_a@ta',
	'bare: every binding is restored, by role name');
is($bare->safe_psql('app', q{SELECT count(*) FROM orch_tasks}), '3', 'bare: the tasks are restored');

# a role created later with a bound name is bound at once: fail closed
$bare->safe_psql('app', q{CREATE ROLE rr_worker_a LOGIN; GRANT orch_worker TO rr_worker_a});
is(visible($bare, 'app', 'rr_worker_a'), '{ta}|a,a',
	'bare: rr_worker_a, created after the restore, is bound to ta');
is( $bare->safe_psql('app',
		q{SET ROLE rr_worker_a; SELECT count(*) FROM orch_dequeue('q', 'w', 10)}),
	'2', "bare: rr_worker_a claims only ta's tasks");
$bare->safe_psql('app', q{CREATE ROLE rr_other LOGIN; GRANT orch_reader TO rr_other});
is(visible($bare, 'app', 'rr_other'), 'all|a,a,b', 'bare: a role bound nowhere is unrestricted');

# the first bind call re-keys the restored bindings of existing roles
is( $bare->safe_psql('app', q{SELECT orch_bind_tenant('rr_worker_a', 'ta')}), 'f',
	'bare: binding rr_worker_a to ta again returns false (it was bound)');
is( $bare->safe_psql('app',
		q{SELECT string_agg(role || ':' || (cluster_id = (SELECT system_identifier FROM pg_control_system()))
		                    || ':' || coalesce((role_oid = (SELECT oid FROM pg_roles WHERE rolname = role))::text, ''),
		                    ',' ORDER BY role)
		    FROM orch.tenant_bindings}),
	'rr_reader_b:false:,rr_renamed:false:,rr_worker_a:true:true',
	"bare: the binding of the existing role is now this cluster's, by OID; the others wait for their roles");
$bare->safe_psql('app', 'ALTER ROLE rr_worker_a RENAME TO rr_worker_x');
is(visible($bare, 'app', 'rr_worker_x'), '{ta}|a,a', 'bare: after re-keying, a rename keeps the binding');

# ---------------------------------------------------------------------------
# 4. Into a cluster with the roles restored first (the documented way)
# ---------------------------------------------------------------------------
my $full = PostgreSQL::Test::Cluster->new('rr_full');
$full->init;
$full->start;
my @full_conn = ('-h', $full->host, '-p', $full->port);
# (the dump creates the bootstrap superuser too, which exists: that one error only)
($ok, $out, $err) = client('psql', @full_conn, '-X', '-q', '-d', 'postgres', '-f', $globals);
my @errors = grep { /ERROR/ } split /\n/, $err;
ok(!grep({ !/role "[^"]+" already exists/ } @errors), 'full: the globals restore (roles first)')
  or diag($err);
($ok, $out, $err) = client('createdb', @full_conn, 'app');
ok($ok, 'full: createdb app') or diag($err);
($ok, $out, $err) = client('pg_restore', @full_conn, '-d', 'app', $dumpfile);
ok($ok, 'full: pg_restore exits 0') or diag("$out\n$err");
unlike("$out\n$err", qr/ERROR|errors ignored/, 'full: pg_restore reports no error');
is(visible($full, 'app', 'rr_worker_a'), '{ta}|a,a', 'full: rr_worker_a is bound to ta');
is(visible($full, 'app', 'rr_reader_b'), '{tb}|b', 'full: rr_reader_b is bound to tb');
is(visible($full, 'app', 'rr_renamed'), '{ta}|a,a', 'full: the renamed role is bound under its new name');

$src->stop;
$bare->stop;
$full->stop;
done_testing();
