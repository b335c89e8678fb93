# t/060_install_hijack.pl: no install or upgrade script can be hijacked by
# the owner of the schema the extension is created in.
#
# CREATE EXTENSION and ALTER EXTENSION UPDATE run the scripts as superuser
# with search_path = <extension schema>, pg_temp (pg_catalog implicitly
# first).  A function or operator that the schema's owner planted there wins
# over the catalog's whenever it matches the call better: public.unnest(text[])
# against pg_catalog.unnest(anyarray), =(oid, regclass) against oideq after a
# cast.  It then runs as superuser, or is bound for good into a view, default,
# check or index that everyone later reads.
#
# 1. Static: t/sql_qualified.py finds no unqualified function, operator or
#    operator-resolving construct (IN, LIKE, NULLIF, ...) in what any
#    installed script executes or binds at install time.  The checker itself
#    is checked on a script with one mistake of each kind.
# 2. Dynamic: a non-superuser owns a database (and so its schema public) and
#    plants, for every function and operator the scripts reach, shadows that
#    beat the catalog's: polymorphic arguments made concrete (text, integer,
#    bigint, jsonb, oid, ...), and arguments narrowed to types that cast
#    implicitly to the catalog's (regclass for oid, name for text, integer
#    for bigint, timestamp for timestamptz, ...), functions, aggregates and
#    operators.  Each shadow counts its calls on a sequence (a rollback
#    cannot undo it).  The trap is shown to be live: unqualified calls of its
#    own signatures, and the 0.7.0 statement of the reported hijack, do reach
#    it.  Then, in a fresh copy of that database for every released version,
#    the superuser runs CREATE EXTENSION orchestrator VERSION '<v>' (which
#    replays the chain up to v) and ALTER EXTENSION orchestrator UPDATE (the
#    rest): no shadow ever ran, and no object of the extension depends on
#    (is bound to) any object the schema's owner made.
use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $checker = "$FindBin::RealBin/sql_qualified.py";

my $node = PostgreSQL::Test::Cluster->new('hijack');
$node->init;
$node->start;

my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
my @scripts = sort glob("$sharedir/extension/orchestrator--*.sql");
ok(scalar(@scripts) >= 2, 'the installed install and upgrade scripts are found: ' . scalar(@scripts));

# ---------------------------------------------------------------------------
# 1. Static
# ---------------------------------------------------------------------------
my ($out, $err) = ('', '');
my $rc = IPC::Run::run([ 'python3', $checker, @scripts ], '>', \$out, '2>', \$err);
ok($rc, 'sql_qualified.py: no finding in any install or upgrade script')
  or diag($out . $err);
like($out, qr/^# 0 finding\(s\) in \d+ script\(s\)$/m, 'the checker read every script');

# The checker finds each kind of mistake (a checker that finds nothing would
# pass everything).
my $bad = "${PostgreSQL::Test::Utils::tmp_check}/bad--1.0.sql";
open(my $fh, '>', $bad) or die "cannot write $bad: $!";
print $fh <<'SQL';
CREATE VIEW v1 AS SELECT unnest(ARRAY['a']) AS x;
CREATE VIEW v2 AS SELECT 1 WHERE 'pg_class'::regclass = 1259;
CREATE VIEW v3 AS SELECT 1 WHERE 'a' IN ('a', 'b');
CREATE VIEW v4 AS SELECT 1 WHERE 'abc' LIKE 'a%';
CREATE VIEW v5 AS SELECT nullif('a', 'b');
CREATE VIEW v6 AS SELECT 1 WHERE 1 IS DISTINCT FROM 2;
CREATE VIEW v7 AS SELECT CASE 1 WHEN 1 THEN 'one' END;
CREATE VIEW v8 AS SELECT 1 FROM pg_catalog.pg_class a JOIN pg_catalog.pg_class b USING (oid);
CREATE VIEW v9 AS SELECT pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 hour' OPERATOR(pg_catalog.>) pg_catalog.now();
CREATE VIEW v10 AS SELECT (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 hour') OPERATOR(pg_catalog.>) pg_catalog.now() AND pg_catalog.abs(-1) OPERATOR(pg_catalog.=) 1;
CREATE TABLE t1 (x int) WITH (fillfactor = 80, autovacuum_enabled = true);
UPDATE t1 SET x = pg_catalog.abs(x), x = 1 WHERE x OPERATOR(pg_catalog.>) 0;
SELECT pg_catalog.format('%s', VARIADIC ARRAY['a']), pg_catalog.make_interval(secs => 1);
DO $$ BEGIN PERFORM format('%s', 1); END $$;
CREATE FUNCTION f(a int DEFAULT abs(-1)) RETURNS int LANGUAGE sql AS $$ SELECT a + 1 $$;
CREATE FUNCTION g() RETURNS int LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$ SELECT abs(-1) + 1 $$;
SQL
close $fh;
$out = '';
IPC::Run::run([ 'python3', $checker, $bad ], '>', \$out, '2>', \$err);
my %want = (
	'unqualified function unnest()' => 1,
	'operator = not written' => 1,
	'IN (...) resolves' => 1,
	'LIKE resolves' => 1,
	'NULLIF resolves' => 1,
	'IS DISTINCT FROM resolves' => 1,
	'simple CASE x WHEN' => 1,
	'JOIN ... USING' => 1,
	'unqualified function format()' => 1,
	'unqualified function abs()' => 1,
	'function without SET search_path' => 1,
	'operator + not written' => 1,
	'binds alike (left to right), so parenthesize' => 1,);
for my $w (sort keys %want)
{
	my $n = () = $out =~ /\Q$w\E/g;
	is($n, $want{$w}, "checker self-test: finds '$w' once");
}
like($out, qr/^# 13 finding\(s\) in 1 script\(s\)$/m,
	'checker self-test: nothing else (qualified calls, pinned bodies, named args pass)')
  or diag($out);

# Harder cases (a review's list): one finding or more on each of the first
# twelve lines, none on the last two (END CASE, type modifiers).
my $bad2 = "${PostgreSQL::Test::Utils::tmp_check}/bad--2.0.sql";
open($fh, '>', $bad2) or die "cannot write $bad2: $!";
print $fh <<'SQL';
CREATE VIEW w1 AS SELECT "unnest"(ARRAY['a']);
CREATE VIEW w2 AS SELECT public.lower('A');
CREATE VIEW w3 AS SELECT 1 WHERE 1 OPERATOR(public.=) 1;
CREATE VIEW w4 AS SELECT 1 FROM pg_catalog.pg_class a JOIN pg_catalog.pg_class b ON texteq(a.relname::text, b.relname::text);
DO $$ DECLARE i int; BEGIN FOR i IN 1..array_length(ARRAY[1], 1) LOOP RAISE NOTICE '%', i; END LOOP; END $$;
CREATE VIEW w6 AS SELECT (ARRAY[1])[1] - 1;
CREATE VIEW w7 AS SELECT timestamptz('2020-01-01'::date);
CREATE FUNCTION h(a int) RETURNS int LANGUAGE sql SET search_path = pg_catalog RETURN abs(a);
CREATE FUNCTION k() RETURNS int LANGUAGE sql SET search_path FROM CURRENT AS $$ SELECT abs(-1) $$;
DO 'BEGIN PERFORM upper(''a''); END';
DO $$ BEGIN EXECUTE pg_catalog.format('CREATE VIEW %I AS SELECT lower(%L)', 'v', 'A'); END $$;
CREATE AGGREGATE agg(int) (sfunc = int4pl, stype = int);
DO $$ BEGIN CASE WHEN true THEN NULL; END CASE; END $$;
CREATE TABLE t2 (a numeric(10, 2), b timestamptz(3));
SQL
close $fh;
$out = '';
IPC::Run::run([ 'python3', $checker, $bad2 ], '>', \$out, '2>', \$err);
my %lines;
$lines{$1}++ while $out =~ /bad--2\.0\.sql:(\d+):/g;
for my $l (1 .. 12)
{
	ok($lines{$l}, "checker self-test: finds line $l of the harder cases")
	  or diag($out);
}
ok(!$lines{13} && !$lines{14}, 'checker self-test: END CASE and type modifiers pass')
  or diag($out);

# ---------------------------------------------------------------------------
# 2. Dynamic: the trap
# ---------------------------------------------------------------------------
$out = '';
IPC::Run::run([ 'python3', $checker, '--names', @scripts ], '>', \$out, '2>', \$err)
  or die "sql_qualified.py --names failed: $err";
my @funcs = map { /^function (\S+)$/ ? $1 : () } split /\n/, $out;
my @ops = map { /^operator (\S+)$/ ? $1 : () } split /\n/, $out;
# What 0.7.0's upgrade script reached unqualified (the reported hijack), and
# what any script could reach with a qualifier dropped.
push @funcs, qw(unnest format now nextval count sum max min array_agg coalesce
  jsonb_build_object string_to_array array_length pg_has_role);
push @ops, qw(= <> < > <= >= ~~ ~ - + || @>);
my %seen;
@funcs = grep { !$seen{"f$_"}++ } @funcs;
@ops = grep { !$seen{"o$_"}++ } @ops;
ok(scalar(@funcs) > 10 && scalar(@ops) > 5,
	'names to plant: ' . scalar(@funcs) . ' functions, ' . scalar(@ops) . ' operators');

$node->safe_psql('postgres', q{
	CREATE ROLE mallory LOGIN;
	CREATE DATABASE hj_template OWNER mallory;
});

my $funcs_lit = join(',', map { "'$_'" } @funcs);
my $ops_lit = join(',', map { "'" . ($_ =~ s/'/''/gr) . "'" } @ops);

# Planted as mallory (SET ROLE: every object is hers).  hj_hit() counts a
# call on a sequence and returns NULL; a shadow returns NULL too.
my $planted = $node->safe_psql('hj_template', <<"SQL");
SET ROLE mallory;
SET search_path = pg_catalog, pg_temp;
CREATE SEQUENCE public.hj_hits;
GRANT ALL ON SEQUENCE public.hj_hits TO PUBLIC;
CREATE TABLE public.hj_planted (kind text, name text, sig text);
CREATE FUNCTION public.hj_hit() RETURNS void LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp
  AS \$\$ BEGIN PERFORM pg_catalog.nextval('public.hj_hits'); END \$\$;

CREATE FUNCTION pg_temp.variants(args oid[], ret oid)
RETURNS TABLE (a text[], r text) LANGUAGE plpgsql AS \$v\$
DECLARE
    poly_elem oid[] := ARRAY['anyelement', 'anynonarray', 'anycompatible',
                             'anycompatiblenonarray', '"any"']::regtype[]::oid[];
    poly_arr oid[] := ARRAY['anyarray', 'anycompatiblearray']::regtype[]::oid[];
    bases text[] := ARRAY['text', 'integer', 'bigint', 'jsonb', 'oid', 'name',
                          'timestamp with time zone', 'boolean'];
    narrow jsonb := '{"oid": ["regclass", "regtype", "regproc", "regprocedure", "regnamespace", "regrole", "integer"],
                      "text": ["name", "character varying", "character"],
                      "bigint": ["integer", "smallint"], "integer": ["smallint"],
                      "numeric": ["integer", "bigint"],
                      "double precision": ["integer", "bigint", "numeric", "real"],
                      "timestamp with time zone": ["timestamp without time zone", "date"]}';
    b text; i int; t text; names text[]; is_poly bool := false; n text;
BEGIN
    -- proargtypes is an oidvector: its array starts at index 0
    args := ARRAY(SELECT x FROM unnest(args) WITH ORDINALITY u(x, o) ORDER BY o);
    IF EXISTS (SELECT 1 FROM pg_type WHERE oid = ANY (args || ret)
                AND (typname IN ('internal', 'cstring', 'record', 'trigger', 'void', 'anyrange',
                                 'anymultirange', 'anyenum', 'anycompatiblerange',
                                 'anycompatiblemultirange', 'event_trigger', 'language_handler')
                     OR typtype = 'p' AND NOT (oid = ANY (poly_elem || poly_arr)))) THEN
        RETURN;
    END IF;
    SELECT array_agg(format_type(x, NULL) ORDER BY o) INTO names FROM unnest(args) WITH ORDINALITY u(x, o);
    names := coalesce(names, '{}');
    is_poly := (args || ret) && (poly_elem || poly_arr);
    IF is_poly THEN
        FOREACH b IN ARRAY bases LOOP
            a := '{}';
            FOR i IN 1 .. coalesce(array_length(args, 1), 0) LOOP
                a := a || CASE WHEN args[i] = ANY (poly_elem) THEN b
                               WHEN args[i] = ANY (poly_arr) THEN b || '[]'
                               ELSE names[i] END;
            END LOOP;
            r := CASE WHEN ret = ANY (poly_elem) THEN b WHEN ret = ANY (poly_arr) THEN b || '[]'
                      ELSE format_type(ret, NULL) END;
            RETURN NEXT;
        END LOOP;
    ELSE
        r := format_type(ret, NULL);
        FOR i IN 1 .. coalesce(array_length(args, 1), 0) LOOP
            FOR n IN SELECT jsonb_array_elements_text(narrow -> names[i]) LOOP
                a := names;
                a[i] := n;
                RETURN NEXT;
            END LOOP;
        END LOOP;
    END IF;
END \$v\$;

DO \$plant\$
DECLARE
    p record; v record; k int := 0; sig text;
BEGIN
    -- functions and aggregates
    FOR p IN SELECT proname, prokind, proargtypes::oid[] AS args, prorettype, proretset
               FROM pg_proc
              WHERE pronamespace = 'pg_catalog'::regnamespace
                AND proname = ANY (ARRAY[$funcs_lit]::text[])
                AND prokind IN ('f', 'a')
                AND NOT coalesce(proargmodes && ARRAY['o', 'b', 't']::"char"[], false) LOOP
        FOR v IN SELECT * FROM pg_temp.variants(p.args, p.prorettype) LOOP
            sig := array_to_string(v.a, ', ');
            k := k + 1;
            BEGIN
                IF p.prokind = 'f' THEN
                    EXECUTE format('CREATE FUNCTION public.%I(%s) RETURNS %s%s LANGUAGE plpgsql '
                                   'AS \$\$ BEGIN PERFORM public.hj_hit(); RETURN%s; END \$\$',
                                   p.proname, sig, CASE WHEN p.proretset THEN 'SETOF ' ELSE '' END, v.r,
                                   CASE WHEN p.proretset THEN '' ELSE ' NULL' END);
                ELSIF array_length(v.a, 1) > 0 THEN
                    EXECUTE format('CREATE FUNCTION public.hj_sf_%s(%s, %s) RETURNS %s LANGUAGE plpgsql '
                                   'AS \$\$ BEGIN PERFORM public.hj_hit(); RETURN NULL; END \$\$',
                                   k, v.r, sig, v.r);
                    EXECUTE format('CREATE AGGREGATE public.%I(%s) (sfunc = public.hj_sf_%s, stype = %s)',
                                   p.proname, sig, k, v.r);
                ELSE
                    CONTINUE;
                END IF;
                INSERT INTO public.hj_planted VALUES (CASE p.prokind WHEN 'f' THEN 'function' ELSE 'aggregate' END,
                                                      p.proname, sig);
            EXCEPTION WHEN duplicate_function OR invalid_function_definition OR datatype_mismatch
                           OR wrong_object_type OR feature_not_supported THEN
                NULL;   -- same signature already planted, or not a valid shadow
            END;
        END LOOP;
    END LOOP;
    -- binary operators
    FOR p IN SELECT oprname, ARRAY[oprleft, oprright] AS args, oprresult
               FROM pg_operator
              WHERE oprnamespace = 'pg_catalog'::regnamespace AND oprkind = 'b'
                AND oprname = ANY (ARRAY[$ops_lit]::text[]) LOOP
        FOR v IN SELECT * FROM pg_temp.variants(p.args, p.oprresult) LOOP
            k := k + 1;
            BEGIN
                EXECUTE format('CREATE FUNCTION public.hj_op_%s(%s, %s) RETURNS %s LANGUAGE plpgsql '
                               'AS \$\$ BEGIN PERFORM public.hj_hit(); RETURN NULL; END \$\$',
                               k, v.a[1], v.a[2], v.r);
                EXECUTE format('CREATE OPERATOR public.%s (leftarg = %s, rightarg = %s, function = public.hj_op_%s)',
                               p.oprname, v.a[1], v.a[2], k);
                INSERT INTO public.hj_planted VALUES ('operator', p.oprname, v.a[1] || ', ' || v.a[2]);
            EXCEPTION WHEN duplicate_function OR duplicate_object OR invalid_function_definition
                           OR datatype_mismatch OR invalid_object_definition THEN
                NULL;
            END;
        END LOOP;
    END LOOP;
END
\$plant\$;
SELECT kind || ' ' || count(*) FROM public.hj_planted GROUP BY kind ORDER BY kind;
SQL
note("planted in public: " . join(', ', split /\n/, $planted));
like($planted, qr/function \d+/, 'shadow functions planted');
like($planted, qr/operator \d+/, 'shadow operators planted');
like($planted, qr/aggregate \d+/, 'shadow aggregates planted');

# hits in a database, read with pg_catalog first and nothing else
sub hits
{
	my ($db) = @_;
	return $node->safe_psql($db, q{
		SET search_path = pg_catalog, pg_temp;
		SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.hj_hits});
}

# The trap is live: as the superuser, under the search_path CREATE EXTENSION
# uses, the unqualified forms reach the shadows.
my @live = (
	[ q{SELECT count(*) FROM unnest('{a}'::text[])}, 'unnest(text[])' ],
	[ q{SELECT 1::oid = 'pg_class'::regclass}, q{=(oid, regclass)} ],
	[ q{SELECT 1::oid <> 'int4'::regtype}, q{<>(oid, regtype)} ],
	[ q{SELECT 'a'::varchar LIKE 'a%'}, q{~~(varchar, text) narrowed} ],
	[ q{SELECT format('%s', 1::bigint)}, 'format(text, ...) via text' ],
	[ q{SELECT max(x) FROM (VALUES ('{a}'::text[])) v(x)}, 'max(text[])' ],
	[ q{SELECT array_agg(x) FROM (VALUES ('a'::text)) v(x)}, 'array_agg(text)' ],
	# the 0.7.0 statement behind the reported hijack
	[ q{SELECT count(*) FROM pg_catalog.pg_proc p
	     WHERE p.oid NOT IN ('pg_catalog.now()'::regprocedure)
	       AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'jit=%')},
	  'the 0.5.0->0.6.0 statement as released in 0.7.0' ],);
for my $case (@live)
{
	my ($sql, $what) = @$case;
	my $before = hits('hj_template');
	$node->psql('hj_template', "SET search_path = public, pg_temp; $sql");
	cmp_ok(hits('hj_template'), '>', $before, "trap is live: $what reaches a planted shadow");
}
$node->safe_psql('hj_template', q{
	SET search_path = pg_catalog, pg_temp;
	SELECT pg_catalog.setval('public.hj_hits', 1, false)});
is(hits('hj_template'), '0', 'trap reset');

# ---------------------------------------------------------------------------
# Install every released version, then update to the newest
# ---------------------------------------------------------------------------
my %versions;
for my $s (@scripts)
{
	my ($name) = $s =~ m{orchestrator--([^/]+)\.sql$};
	$versions{$_} = 1 for split /--/, $name;
}
my $default = $node->safe_psql('postgres',
	q{SELECT default_version FROM pg_available_extensions WHERE name = 'orchestrator'});
my @versions = sort { version_key($a) <=> version_key($b) } keys %versions;
sub version_key { my @p = split /\./, $_[0]; return $p[0] * 1e6 + $p[1] * 1e3 + $p[2]; }
ok(scalar(@versions) >= 7, 'versions: ' . join(' ', @versions) . " (default $default)");

my $i = 0;
for my $v (@versions)
{
	$i++;
	my $db = "hj_$i";
	$node->safe_psql('postgres', "CREATE DATABASE $db TEMPLATE hj_template OWNER mallory");
	my ($ok_create, $out_create, $err_create) = (0, '', '');
	$ok_create = $node->psql($db, "CREATE EXTENSION orchestrator VERSION '$v'",
		stdout => \$out_create, stderr => \$err_create) == 0;
	ok($ok_create, "$v: CREATE EXTENSION orchestrator VERSION '$v' under the trap")
	  or diag($err_create);
	is(hits($db), '0', "$v: no planted shadow ran during the install");
	my ($ok_up, $err_up) = (0, '');
	$ok_up = $node->psql($db, 'ALTER EXTENSION orchestrator UPDATE', stderr => \$err_up) == 0;
	ok($ok_up, "$v: ALTER EXTENSION orchestrator UPDATE under the trap") or diag($err_up);
	is($node->safe_psql($db, q{
		SET search_path = pg_catalog, pg_temp;
		SELECT extversion FROM pg_extension WHERE extname = 'orchestrator'}),
		$default, "$v: updated to $default");
	is(hits($db), '0', "$v: no planted shadow ran during the upgrade");
	# Nothing of the extension is bound to mallory's objects (views,
	# defaults, checks, index expressions, trigger conditions, functions).
	my $bound = $node->safe_psql($db, q{
		SET search_path = pg_catalog, pg_temp;
		WITH hers AS (
		    SELECT 'pg_proc'::regclass AS cls, oid FROM pg_proc WHERE proowner = 'mallory'::regrole
		    UNION ALL
		    SELECT 'pg_operator'::regclass, oid FROM pg_operator WHERE oprowner = 'mallory'::regrole)
		SELECT count(*) || coalesce(': ' || string_agg(pg_describe_object(d.classid, d.objid, d.objsubid)
		                                 || ' -> ' || pg_describe_object(d.refclassid, d.refobjid, 0), '; '), '')
		  FROM pg_depend d
		  JOIN hers h ON h.cls = d.refclassid AND h.oid = d.refobjid
		 WHERE NOT EXISTS (SELECT 1 FROM hers h2 WHERE h2.cls = d.classid AND h2.oid = d.objid)
		   AND d.classid <> 'pg_aggregate'::regclass});
	is($bound, '0', "$v: no object of the extension is bound to a planted function or operator");
	# and the extension works under the trap
	my $before_api = hits($db);
	is($node->safe_psql($db, q{
		SELECT public.orch_enqueue('hj', '{"n": 1}') IS NOT NULL
		   AND (SELECT pg_catalog.count(*) FROM public.orch_dequeue('hj', 'w')) OPERATOR(pg_catalog.=) 1}),
		't', "$v: enqueue and claim work after the update");
	is(hits($db), $before_api, "$v: and the API reached no planted shadow either");
	$node->safe_psql('postgres', "DROP DATABASE $db");
}

$node->stop;
done_testing();
