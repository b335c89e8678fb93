-- The full install script of the default version (sql/orchestrator--0.8.0.sql)
-- creates exactly the catalog that 0.1.0 followed by every update script
-- creates: the same fingerprint (scripts/catalog_fingerprint.sql: every member
-- of the extension and everything in schema orch, with definitions, settings,
-- privileges, comments, policies, seed rows, roles and config-dump
-- registrations) after an update from 0.1.0, from 0.6.0 and from 0.7.0 as
-- after CREATE EXTENSION of the default version.
\set VERBOSITY terse
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS orchestrator CASCADE;
-- the view orch_catalog_fingerprint (temporary; it depends on no object of
-- the extension, so it outlives DROP EXTENSION)
\getenv abs_srcdir PG_ABS_SRCDIR
\set orch_fp_view_only 1
\i :abs_srcdir/../scripts/catalog_fingerprint.sql

-- The update path from 0.1.0.
CREATE EXTENSION orchestrator VERSION '0.1.0';
ALTER EXTENSION orchestrator UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'orchestrator';
CREATE TEMP TABLE fp_from_010 AS TABLE orch_catalog_fingerprint;
-- (a column that an update added with a default keeps it as a "missing
-- value": not in the fingerprint; here it shows which script ran)
SELECT attname, atthasmissing FROM pg_attribute
 WHERE attrelid = 'orch.state_transitions'::regclass AND attname = 'tenant_id';
DROP EXTENSION orchestrator CASCADE;

-- From 0.6.0 (installed through 0.1.0 and its updates, in one statement).
CREATE EXTENSION orchestrator VERSION '0.6.0';
ALTER EXTENSION orchestrator UPDATE;
CREATE TEMP TABLE fp_from_060 AS TABLE orch_catalog_fingerprint;
DROP EXTENSION orchestrator CASCADE;

-- From 0.7.0.
CREATE EXTENSION orchestrator VERSION '0.7.0';
ALTER EXTENSION orchestrator UPDATE;
CREATE TEMP TABLE fp_from_070 AS TABLE orch_catalog_fingerprint;
DROP EXTENSION orchestrator CASCADE;

-- The full install script: no update ran (no column kept a missing value).
CREATE EXTENSION orchestrator;
SELECT extversion FROM pg_extension WHERE extname = 'orchestrator';
SELECT attname, atthasmissing FROM pg_attribute
 WHERE attrelid = 'orch.state_transitions'::regclass AND attname = 'tenant_id';
CREATE TEMP TABLE fp_full AS TABLE orch_catalog_fingerprint;

-- Not vacuous: every kind of line, and many lines.
SELECT string_agg(kind, ' ' ORDER BY kind) AS kinds, sum(n) > 2000 AS many_lines
  FROM (SELECT kind, count(*) AS n FROM fp_full GROUP BY kind) k;
SELECT (SELECT count(*) FROM fp_from_010) = (SELECT count(*) FROM fp_full) AS same_count_010,
       (SELECT count(*) FROM fp_from_060) = (SELECT count(*) FROM fp_full) AS same_count_060,
       (SELECT count(*) FROM fp_from_070) = (SELECT count(*) FROM fp_full) AS same_count_070;

-- The differences, either way (none).
SELECT d.side, d.kind, d.object, d.detail FROM (
    SELECT 'only from 0.1.0' AS side, * FROM (TABLE fp_from_010 EXCEPT ALL TABLE fp_full) x
    UNION ALL
    SELECT 'only from 0.6.0', * FROM (TABLE fp_from_060 EXCEPT ALL TABLE fp_full) x
    UNION ALL
    SELECT 'only from 0.7.0', * FROM (TABLE fp_from_070 EXCEPT ALL TABLE fp_full) x
    UNION ALL
    SELECT 'only in full script, not from 0.1.0', * FROM (TABLE fp_full EXCEPT ALL TABLE fp_from_010) x
    UNION ALL
    SELECT 'only in full script, not from 0.6.0', * FROM (TABLE fp_full EXCEPT ALL TABLE fp_from_060) x
    UNION ALL
    SELECT 'only in full script, not from 0.7.0', * FROM (TABLE fp_full EXCEPT ALL TABLE fp_from_070) x
) d
ORDER BY d.kind COLLATE "C", d.object COLLATE "C", d.side COLLATE "C", d.detail COLLATE "C";
