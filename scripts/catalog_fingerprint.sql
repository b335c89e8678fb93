\set orch_fp_echo :ECHO
\set ECHO none
\set orch_fp_quiet :QUIET
\set QUIET on
-- scripts/catalog_fingerprint.sql: a canonical, sorted description of
-- everything the extension orchestrator owns and everything in schema orch,
-- so that two databases (or two installs in one database) can be diffed.
--
-- Usage (psql, as a superuser, in the database to describe):
--     psql -X -At -f scripts/catalog_fingerprint.sql > a.txt
--         defines the view and prints the fingerprint (kind|object|detail);
--         diff two such files.
--     psql -X -At -v orch_fp_view_only=1 -f scripts/catalog_fingerprint.sql \
--          -c 'TABLE orch_catalog_fingerprint'
--         the same, in two steps.
--     In a psql session (pg_regress: test/sql/install_script.sql):
--         \set orch_fp_view_only 1
--         \i .../scripts/catalog_fingerprint.sql
--         CREATE TEMP TABLE fp_a AS TABLE orch_catalog_fingerprint;
--
-- It defines, in the session's pg_temp schema, the view
-- orch_catalog_fingerprint (kind, object, detail), ordered, and its helper
-- pg_temp.orch_catalog_seed_rows().  The view reads the catalogs only when
-- it is queried (it depends on no object of the extension), so it survives
-- DROP EXTENSION and describes whatever is installed at the time: query it
-- after each install.  Without orch_fp_view_only the script also prints it.
-- Names are printed as the session's search_path shows them: compare
-- fingerprints taken with the same search_path.
--
-- What it lists (no OIDs, nothing that differs between equal installs):
--   extension     version, schema, relocatable, comment
--   member        every object of the extension (pg_depend deptype 'e')
--   schema        the schemas of the members and orch: owner, ACL, comment
--   function      the members and the functions in orch:
--                 pg_get_functiondef, proconfig, ACL, security definer,
--                 volatility, parallel safety, leakproof, strictness,
--                 cost, rows, kind, language, owner, comment
--   table, view, sequence (the members and the relations in orch):
--                 kind, owner, ACL, reloptions, persistence, row security
--                 (enabled, forced), replica identity, parents, comment,
--                 member or not; a view's pg_get_viewdef; a sequence's
--                 parameters and owner column (not its current value: data)
--   column        per table, view and composite type, in column order
--                 (position among the columns not dropped): name, type and
--                 typmod, default expression, not null, identity, generated,
--                 collation (when not the type's), column ACL, options,
--                 comment
--   constraint    pg_get_constraintdef, comment
--   index         pg_get_indexdef, clustered, replica identity, comment
--   trigger       pg_get_triggerdef, tgenabled, comment (not internal
--                 triggers: foreign keys are listed as constraints)
--   policy        command, permissive, roles, USING and WITH CHECK
--   type          the types in orch and the member types (not the row and
--                 array types of relations): kind, owner, ACL, comment,
--                 member or not (a composite type's attributes: column)
--   config_dump   pg_extension_config_dump registrations (extconfig as
--                 regclass, extcondition)
--   seed_row      the rows of member tables that pg_dump leaves to the
--                 extension (a table registered with a condition: the rows
--                 the condition excludes; a table not registered: all its
--                 rows; a table registered with '' holds user data only):
--                 to_jsonb of the row without columns whose values differ
--                 between installs (timestamp types; defaults from
--                 pg_current_xact_id())
--   role          the roles the install script creates: attributes
--   role_member   memberships among those roles (with ADMIN OPTION)
-- ACLs are printed sorted (the order of aclitems carries no meaning).
-- Not listed: physical state (relfilenodes, statistics, atthasmissing of a
-- column added with a default), sequence values, user data.

-- Rows of member tables that belong to the extension (see seed_row above).
CREATE OR REPLACE FUNCTION pg_temp.orch_catalog_seed_rows()
RETURNS TABLE (tbl text, r text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    c record;
BEGIN
    FOR c IN
        SELECT cl.oid::regclass AS rel,
               (SELECT cfg.cond FROM pg_extension e2,
                       LATERAL unnest(e2.extconfig, e2.extcondition) AS cfg(rel, cond)
                 WHERE e2.oid = e.oid AND cfg.rel = cl.oid) AS cond,
               EXISTS (SELECT 1 FROM pg_extension e2, LATERAL unnest(e2.extconfig) AS x(rel)
                        WHERE e2.oid = e.oid AND x.rel = cl.oid) AS registered,
               coalesce((SELECT array_agg(a.attname::text)
                           FROM pg_attribute a
                           LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
                          WHERE a.attrelid = cl.oid AND a.attnum > 0 AND NOT a.attisdropped
                            AND (a.atttypid IN ('timestamptz'::regtype, 'timestamp'::regtype, 'date'::regtype)
                                 OR pg_get_expr(ad.adbin, ad.adrelid) LIKE '%pg_current_xact_id%')),
                        '{}') AS volatile_cols
          FROM pg_extension e
          JOIN pg_depend d ON d.refclassid = 'pg_extension'::regclass AND d.refobjid = e.oid
                          AND d.deptype = 'e' AND d.classid = 'pg_class'::regclass
          JOIN pg_class cl ON cl.oid = d.objid AND cl.relkind IN ('r', 'p')
         WHERE e.extname = 'orchestrator'
    LOOP
        CONTINUE WHEN c.registered AND coalesce(c.cond, '') = '';
        RETURN QUERY EXECUTE format(
            'SELECT %L::text, (to_jsonb(t) - %L::text[])::text FROM %s t WHERE NOT coalesce((%s), false)',
            c.rel::text, c.volatile_cols, c.rel,
            CASE WHEN c.registered
                 THEN regexp_replace(c.cond, '^\s*WHERE\s+', '', 'i')
                 ELSE 'false' END);
    END LOOP;
END
$fn$;

CREATE OR REPLACE TEMP VIEW orch_catalog_fingerprint AS
WITH
ext AS (
    SELECT e.* FROM pg_extension e WHERE e.extname = 'orchestrator'),
members AS (
    SELECT d.classid, d.objid, d.objsubid FROM pg_depend d
     WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
       AND d.refobjid IN (SELECT oid FROM ext)),
orchns AS (
    SELECT n.oid FROM pg_namespace n WHERE n.nspname = 'orch'),
procs AS (
    SELECT p.*, pg_identify_object('pg_proc'::regclass, p.oid, 0) AS id,
           EXISTS (SELECT 1 FROM members m WHERE m.classid = 'pg_proc'::regclass AND m.objid = p.oid) AS member
      FROM pg_proc p
     WHERE p.oid IN (SELECT objid FROM members WHERE classid = 'pg_proc'::regclass)
        OR p.pronamespace IN (SELECT oid FROM orchns)),
rels AS (
    SELECT c.*, pg_identify_object('pg_class'::regclass, c.oid, 0) AS id,
           EXISTS (SELECT 1 FROM members m WHERE m.classid = 'pg_class'::regclass AND m.objid = c.oid) AS member
      FROM pg_class c
     WHERE (c.oid IN (SELECT objid FROM members WHERE classid = 'pg_class'::regclass)
            OR c.relnamespace IN (SELECT oid FROM orchns))
       AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
       -- the history's range partitions are data (orch_maintain creates and
       -- retires them; an update attaches the old table as one), not schema
       AND NOT (c.relispartition AND c.oid NOT IN (SELECT objid FROM members WHERE classid = 'pg_class'::regclass))),
-- standalone types: the members, and the types in orch that are not the row
-- or array type of a relation (composite types: their attributes as columns)
types AS (
    SELECT t.*, pg_identify_object('pg_type'::regclass, t.oid, 0) AS id,
           EXISTS (SELECT 1 FROM members m WHERE m.classid = 'pg_type'::regclass AND m.objid = t.oid) AS member
      FROM pg_type t
     WHERE (t.oid IN (SELECT objid FROM members WHERE classid = 'pg_type'::regclass)
            OR t.typnamespace IN (SELECT oid FROM orchns))
       AND (t.typrelid = 0 OR (SELECT c.relkind FROM pg_class c WHERE c.oid = t.typrelid) = 'c')
       AND NOT EXISTS (SELECT 1 FROM pg_type el WHERE el.typarray = t.oid)),
-- the relations whose columns are listed: tables, views, composite types
colrels AS (
    SELECT r.oid, r.id FROM rels r WHERE r.relkind <> 'S'
    UNION ALL
    SELECT t.typrelid, t.id FROM types t WHERE t.typrelid <> 0),
nss AS (
    SELECT n.*, pg_identify_object('pg_namespace'::regclass, n.oid, 0) AS id
      FROM pg_namespace n
     WHERE n.oid IN (SELECT objid FROM members WHERE classid = 'pg_namespace'::regclass)
        OR n.oid IN (SELECT oid FROM orchns)),
script_roles AS (
    SELECT r.* FROM pg_roles r
     WHERE r.rolname IN ('orch_admin', 'orch_worker', 'orch_producer', 'orch_approver', 'orch_reader')),
lines (kind, object, detail) AS (
    -- the extension
    SELECT 'extension', e.extname::text,
           format('version=%s schema=%s relocatable=%s comment=%s', e.extversion,
                  e.extnamespace::regnamespace, e.extrelocatable,
                  coalesce(obj_description(e.oid, 'pg_extension'), '<none>'))
      FROM ext e
    UNION ALL
    SELECT 'member', pg_describe_object(m.classid, m.objid, m.objsubid), ''
      FROM members m
    UNION ALL
    SELECT 'config_dump', cfg.rel::regclass::text, coalesce(cfg.cond, '<null>')
      FROM ext e, LATERAL unnest(e.extconfig, e.extcondition) AS cfg(rel, cond)
    UNION ALL
    -- schemas
    SELECT 'schema', (n.id).identity, x.detail
      FROM nss n, LATERAL (VALUES
        ('owner=' || pg_get_userbyid(n.nspowner)),
        ('acl=' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(n.nspacl) a), '<default>')),
        ('comment=' || coalesce(obj_description(n.oid, 'pg_namespace'), '<none>')),
        ('member=' || EXISTS (SELECT 1 FROM members m WHERE m.classid = 'pg_namespace'::regclass AND m.objid = n.oid)))
        AS x(detail)
    UNION ALL
    -- functions
    SELECT 'function', (p.id).identity, x.detail
      FROM procs p, LATERAL (VALUES
        ('definition=' || pg_get_functiondef(p.oid)),
        ('proconfig=' || coalesce(p.proconfig::text, '<null>')),
        ('acl=' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(p.proacl) a), '<default>')),
        ('security_definer=' || p.prosecdef),
        ('volatility=' || p.provolatile::text),
        ('parallel=' || p.proparallel::text),
        ('leakproof=' || p.proleakproof),
        ('strict=' || p.proisstrict),
        ('cost=' || p.procost),
        ('rows=' || p.prorows),
        ('kind=' || p.prokind::text),
        ('language=' || (SELECT l.lanname FROM pg_language l WHERE l.oid = p.prolang)),
        ('owner=' || pg_get_userbyid(p.proowner)),
        ('comment=' || coalesce(obj_description(p.oid, 'pg_proc'), '<none>')),
        ('member=' || p.member))
        AS x(detail)
    UNION ALL
    -- relations: tables, views, sequences
    SELECT (r.id).type, (r.id).identity, x.detail
      FROM rels r, LATERAL (VALUES
        ('relkind=' || r.relkind::text),
        ('owner=' || pg_get_userbyid(r.relowner)),
        ('acl=' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(r.relacl) a), '<default>')),
        ('reloptions=' || coalesce(r.reloptions::text, '<null>')),
        ('persistence=' || r.relpersistence::text),
        ('row_security=' || r.relrowsecurity),
        ('force_row_security=' || r.relforcerowsecurity),
        ('replica_identity=' || r.relreplident::text),
        ('inherits=' || coalesce((SELECT string_agg(i.inhparent::regclass::text, ',' ORDER BY i.inhseqno)
                                    FROM pg_inherits i WHERE i.inhrelid = r.oid), '<none>')),
        ('comment=' || coalesce(obj_description(r.oid, 'pg_class'), '<none>')),
        ('member=' || r.member))
        AS x(detail)
    UNION ALL
    SELECT 'view', (r.id).identity, 'definition=' || pg_get_viewdef(r.oid)
      FROM rels r WHERE r.relkind IN ('v', 'm')
    UNION ALL
    SELECT 'sequence', (r.id).identity,
           format('type=%s start=%s increment=%s min=%s max=%s cache=%s cycle=%s owned_by=%s',
                  format_type(s.seqtypid, NULL), s.seqstart, s.seqincrement, s.seqmin, s.seqmax,
                  s.seqcache, s.seqcycle,
                  coalesce((SELECT string_agg(pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), ',')
                              FROM pg_depend d
                             WHERE d.classid = 'pg_class'::regclass AND d.objid = r.oid
                               AND d.deptype IN ('a', 'i') AND d.refclassid = 'pg_class'::regclass),
                           '<none>'))
      FROM rels r JOIN pg_sequence s ON s.seqrelid = r.oid
    UNION ALL
    -- standalone types
    SELECT 'type', (t.id).identity, x.detail
      FROM types t, LATERAL (VALUES
        ('typtype=' || t.typtype::text),
        ('owner=' || pg_get_userbyid(t.typowner)),
        ('acl=' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(t.typacl) a), '<default>')),
        ('comment=' || coalesce(obj_description(t.oid, 'pg_type'), '<none>')),
        ('member=' || t.member))
        AS x(detail)
    UNION ALL
    -- columns, in order (position among the columns not dropped)
    SELECT 'column', (cr.id).identity,
           format('%s %s %s%s%s%s%s%s%s%s%s',
                  lpad((row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum))::text, 3, '0'),
                  quote_ident(a.attname), format_type(a.atttypid, a.atttypmod),
                  CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
                  coalesce(' DEFAULT ' || pg_get_expr(ad.adbin, ad.adrelid), ''),
                  CASE a.attidentity WHEN 'a' THEN ' GENERATED ALWAYS AS IDENTITY'
                                     WHEN 'd' THEN ' GENERATED BY DEFAULT AS IDENTITY' ELSE '' END,
                  CASE a.attgenerated WHEN 's' THEN ' GENERATED ALWAYS (stored)' ELSE '' END,
                  CASE WHEN a.attcollation <> (SELECT ty.typcollation FROM pg_type ty WHERE ty.oid = a.atttypid)
                       THEN ' COLLATE ' || (SELECT quote_ident(co.collname) FROM pg_collation co WHERE co.oid = a.attcollation)
                       ELSE '' END,
                  coalesce(' acl=' || (SELECT string_agg(x::text, ',' ORDER BY x::text) FROM unnest(a.attacl) x), ''),
                  coalesce(' options=' || (SELECT string_agg(o, ',' ORDER BY o) FROM unnest(a.attoptions) o
                                            WHERE o NOT LIKE 'pg\_attver=%'), ''),
                  coalesce(' comment=' || col_description(a.attrelid, a.attnum), ''))
      FROM colrels cr
      JOIN pg_attribute a ON a.attrelid = cr.oid AND a.attnum > 0 AND NOT a.attisdropped
      LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
    UNION ALL
    -- constraints
    SELECT 'constraint', (r.id).identity,
           format('%s: %s%s', quote_ident(co.conname), pg_get_constraintdef(co.oid),
                  coalesce(' comment=' || obj_description(co.oid, 'pg_constraint'), ''))
      FROM rels r JOIN pg_constraint co ON co.conrelid = r.oid
    UNION ALL
    -- indexes
    SELECT 'index', (r.id).identity,
           format('%s%s%s%s', pg_get_indexdef(i.indexrelid),
                  CASE WHEN i.indisclustered THEN ' (clustered)' ELSE '' END,
                  CASE WHEN i.indisreplident THEN ' (replica identity)' ELSE '' END,
                  coalesce(' comment=' || obj_description(i.indexrelid, 'pg_class'), ''))
      FROM rels r JOIN pg_index i ON i.indrelid = r.oid
    UNION ALL
    -- triggers
    SELECT 'trigger', (r.id).identity,
           format('%s enabled=%s%s', pg_get_triggerdef(tg.oid), tg.tgenabled,
                  coalesce(' comment=' || obj_description(tg.oid, 'pg_trigger'), ''))
      FROM rels r JOIN pg_trigger tg ON tg.tgrelid = r.oid AND NOT tg.tgisinternal
    UNION ALL
    -- row-level security policies
    SELECT 'policy', (r.id).identity,
           format('%s: cmd=%s permissive=%s roles=%s using=%s with_check=%s%s',
                  quote_ident(po.polname), po.polcmd, po.polpermissive,
                  (SELECT string_agg(CASE WHEN ro = 0 THEN 'public' ELSE pg_get_userbyid(ro)::text END, ',' ORDER BY 1)
                     FROM unnest(po.polroles) ro),
                  coalesce(pg_get_expr(po.polqual, po.polrelid), '<none>'),
                  coalesce(pg_get_expr(po.polwithcheck, po.polrelid), '<none>'),
                  coalesce(' comment=' || obj_description(po.oid, 'pg_policy'), ''))
      FROM rels r JOIN pg_policy po ON po.polrelid = r.oid
    UNION ALL
    -- the extension's own rows of its tables
    SELECT 'seed_row', s.tbl, s.r FROM pg_temp.orch_catalog_seed_rows() s
    UNION ALL
    -- the roles the install script creates, and their memberships
    SELECT 'role', r.rolname::text,
           format('super=%s inherit=%s createrole=%s createdb=%s login=%s replication=%s bypassrls=%s connlimit=%s valid_until=%s config=%s',
                  r.rolsuper, r.rolinherit, r.rolcreaterole, r.rolcreatedb, r.rolcanlogin,
                  r.rolreplication, r.rolbypassrls, r.rolconnlimit, coalesce(r.rolvaliduntil::text, '<none>'),
                  coalesce(r.rolconfig::text, '<null>'))
      FROM script_roles r
    UNION ALL
    SELECT 'role_member', pg_get_userbyid(am.roleid)::text,
           format('member=%s admin_option=%s', pg_get_userbyid(am.member), am.admin_option)
      FROM pg_auth_members am
     WHERE am.roleid IN (SELECT oid FROM script_roles) AND am.member IN (SELECT oid FROM script_roles)
)
SELECT l.kind, l.object, l.detail FROM lines l
 ORDER BY l.kind COLLATE "C", l.object COLLATE "C", l.detail COLLATE "C";

\if :{?orch_fp_view_only}
\else
TABLE orch_catalog_fingerprint;
\endif
\set QUIET :orch_fp_quiet
\set ECHO :orch_fp_echo
