/* orchestrator 0.5.0 -> 0.6.0: performance (issue 10). */

\echo Use "ALTER EXTENSION orchestrator UPDATE TO '0.6.0'" to load this file. \quit

-- ---------------------------------------------------------------------------
-- No JIT inside the extension's functions.  Their statements are short OLTP
-- statements, but a cached generic plan is costed without knowing its LIMIT
-- or its array sizes: with a backlog of a million tasks the claim's plan
-- costs more than jit_above_cost, and with PostgreSQL's default jit = on
-- every claim compiled its expressions with LLVM (60 times slower here: 2
-- instead of 116 claims of 100 per second).  Trigger functions inherit the
-- setting of the function whose statement fires them; the per-row helpers
-- (the RLS predicate, the histogram helpers) plan nothing.
-- ---------------------------------------------------------------------------
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass
                                     AND d.objid = p.oid AND d.deptype = 'e'
          JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND e.extname = 'orchestrator'
         WHERE p.prorettype <> 'pg_catalog.trigger'::regtype
           AND p.oid NOT IN ('orch.tenant_visible(text)'::regprocedure,
                             'orch.caller_is_admin()'::regprocedure,
                             'orch.histogram_le(double precision)'::regprocedure,
                             'orch.histogram_quantile(double precision, text[], bigint[])'::regprocedure,
                             'orch.task_step_type(bigint, text, text)'::regprocedure)
           AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'jit=%')
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET jit = off', f);
    END LOOP;
END
$$;

-- ---------------------------------------------------------------------------
-- The lifecycle trigger fires once per task row written.  Its SET
-- search_path cost a GUC save and restore per row (about 7% of a batch
-- enqueue); on the task table it runs no SQL, and on a user table the C
-- code now pins search_path itself around the SQL it runs.  It stays
-- SECURITY DEFINER (events of user tables are written as the owner).
-- ---------------------------------------------------------------------------
ALTER FUNCTION orch_state_machine_trigger() RESET search_path;
