/*
 * claim_fair.c
 *	  Which tasks a claim of a queue with "fairness": "round_robin" takes:
 *	  the heads of the keys that have claimable work (tenants, or concurrency
 *	  keys: the queue's fairness_key), each key in turn, and the turns that
 *	  claim used.
 *
 *	  The keys with claimable work are found by a loose index scan (one
 *	  index probe per key, whatever the backlog behind each); their turns
 *	  are rows of orch.fair_turns: the key served longest ago (never served:
 *	  first) goes first, and gives up to its weight of tasks per turn (a
 *	  turn may span claims).  A key whose heads are all locked, or held back
 *	  by the queue's limits, gives up its turn and keeps its place.  The
 *	  turns a claim used are written in its own transaction, under a
 *	  transaction advisory lock per key tried once (never waited for): a
 *	  claim that rolls back gives its turns back, and two claims never wait
 *	  for each other here.
 *
 *	  The tasks without a key of their own (the default tenant's, the tasks
 *	  without a concurrency key) form one more key, looked for among the
 *	  queue's first FAIR_REST_PROBE claimable tasks: the claim index of the
 *	  queue holds every tenant's tasks, and an index of those tasks alone
 *	  would cost every task.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "orchestrator.h"

/* keys one claim looks at; claimable tasks the look for the rest reads */
#define FAIR_KEYS_MAX		10000
#define FAIR_REST_PROBE		"1000"
/* the key of the tasks without one, for fairness_key concurrency_key */
#define FAIR_NO_KEY			""

/* the claimable tasks of the claim's tenants ($2, NULL: all) of queue $1 */
#define CLAIMABLE(T) \
	T ".queue = $1 AND " T ".ready_at <= " ORCH_NOW " AND " ORCH_TENANT_IN(T ".tenant_id", "$2")

/*
 * The keys, by kind, as the conditions of an index: a tenant's claimable
 * tasks are in tasks_tenant_claim_idx (but the default tenant's), a
 * concurrency key's in tasks_key_slots_idx.
 */
#define TENANT_KEYED(T)	T ".tenant_id <> '" ORCH_DEFAULT_TENANT "'"
#define KEY_KEYED(T) \
	T ".concurrency_key IS NOT NULL AND (" T ".state = 'executing' OR " T ".ready_at IS NOT NULL)"

/* Loose index scan: each next key with claimable work, at most $3 */
#define KEYS_SQL(COL, KEYED) \
	"WITH RECURSIVE k(key) AS (" \
	"  (SELECT c." COL " FROM orch.tasks c WHERE " CLAIMABLE("c") " AND " KEYED("c") \
	"   ORDER BY c." COL " LIMIT 1)" \
	"  UNION ALL" \
	"  SELECT (SELECT c." COL " FROM orch.tasks c WHERE " CLAIMABLE("c") " AND " KEYED("c") \
	"          AND c." COL " > k.key ORDER BY c." COL " LIMIT 1)" \
	"    FROM k WHERE k.key IS NOT NULL)" \
	" SELECT key FROM k WHERE key IS NOT NULL LIMIT $3"

/* A bound caller's tenants with claimable work, at most $3 */
#define BOUND_TENANTS_SQL \
	"SELECT w.t FROM pg_catalog.unnest($2::text[]) AS w(t)" \
	" WHERE w.t <> '" ORCH_DEFAULT_TENANT "' AND EXISTS (SELECT 1 FROM orch.tasks c" \
	"   WHERE c.queue = $1 AND c.tenant_id = w.t AND " TENANT_KEYED("c") \
	"     AND c.ready_at <= " ORCH_NOW ")" \
	" ORDER BY 1 LIMIT $3"

/* The queue's first claimable tasks: where the rest is looked for */
#define FIRST_CLAIMABLE \
	"ARRAY(SELECT x.id FROM orch.tasks x WHERE x.queue = $1 AND x.ready_at <= " ORCH_NOW \
	" ORDER BY x.priority, x.created_at, x.id LIMIT " FAIR_REST_PROBE ")"
#define REST_TENANT(T)	T ".tenant_id = '" ORCH_DEFAULT_TENANT "'"
#define REST_KEY(T)		T ".concurrency_key IS NULL"
#define REST_SQL(REST) \
	"SELECT 1 FROM orch.tasks c WHERE c.id = ANY (" FIRST_CLAIMABLE ")" \
	"   AND " CLAIMABLE("c") " AND " REST("c") " LIMIT 1"

/*
 * The heads of keys $3 (at most $4 of each, in claim order), not $5,
 * locked: one index range per key.
 */
#define HEADS_SQL(KEY_EQ) \
	"SELECT y.id, y.owner, y.tenant_id, k.i FROM" \
	" ROWS FROM (pg_catalog.unnest($3::text[]), pg_catalog.unnest($4::int[]))" \
	"  WITH ORDINALITY AS k(key, take, i)," \
	" LATERAL (SELECT c.id, c.owner, c.tenant_id, c.priority, c.created_at FROM orch.tasks c" \
	"   WHERE " CLAIMABLE("c") " AND " KEY_EQ " AND c.id <> ALL ($5)" ORCH_RUN_FILTER_ON("c") \
	"   ORDER BY c.priority, c.created_at, c.id LIMIT k.take FOR UPDATE OF c SKIP LOCKED) y" \
	" ORDER BY k.i, y.priority, y.created_at, y.id"
#define HEADS_TENANT HEADS_SQL("c.tenant_id = k.key AND " TENANT_KEYED("c"))
#define HEADS_KEY HEADS_SQL("c.concurrency_key = k.key AND " KEY_KEYED("c"))
/* ... and of the rest ($3 its take, $4 the ids taken) */
#define REST_HEADS_SQL(REST) \
	"SELECT c.id, c.owner, c.tenant_id FROM orch.tasks c" \
	" WHERE c.id = ANY (" FIRST_CLAIMABLE ") AND " CLAIMABLE("c") " AND " REST("c") \
	"   AND c.id <> ALL ($4)" ORCH_RUN_FILTER_ON("c") \
	" ORDER BY c.priority, c.created_at, c.id LIMIT $3 FOR UPDATE OF c SKIP LOCKED"

/* One key of a fair claim, and its turn */
typedef struct FairKey
{
	char	   *key;
	bool		rest;			/* the tasks without a key of their own */
	int32		weight;
	int32		credit;			/* tasks left of its turn */
	bool		served;			/* it has been served (stamp valid) */
	int64		stamp;			/* when it was last served: a sequence value */
	int32		take;			/* asked of it by this claim */
	int32		got;			/* candidates it gave */
	int32		claimed;		/* of which the claim took */
} FairKey;

struct FairClaim
{
	const char *queue;
	bool		by_key;			/* fairness_key concurrency_key */
	Datum		tenants;		/* $2: text[], (Datum) 0 for all */
	FairKey    *keys;
	int			nkeys;
	int			allowed;
	/* the candidates, in claim order: id, owner, tenant, key index */
	int			n;
	int64	   *ids;
	char	  **owners;
	char	  **cand_tenants;
	int		   *cand_key;
};

static void
arg_tenants(OrchArgs *a, Datum tenants)
{
	orch_arg(a, TEXTARRAYOID, tenants, tenants == (Datum) 0);
}

static void
add_key(FairClaim *fc, const char *key, bool rest)
{
	FairKey    *k = &fc->keys[fc->nkeys++];

	memset(k, 0, sizeof(*k));
	k->key = pstrdup(key);
	k->rest = rest;
	k->weight = 1;
}

/* The keys with claimable work (the rest last, when it has some) */
static void
find_keys(FairClaim *fc, bool all_tenants)
{
	OrchArgs	a = {0};
	uint64		n;
	char	  **keys;

	orch_arg_text(&a, fc->queue);
	arg_tenants(&a, fc->tenants);
	orch_arg_int4(&a, FAIR_KEYS_MAX);
	if (fc->by_key)
		n = orch_args_sql(&a, KEYS_SQL("concurrency_key", KEY_KEYED), false, 0, SPI_OK_SELECT);
	else if (all_tenants)
		n = orch_args_sql(&a, KEYS_SQL("tenant_id", TENANT_KEYED), false, 0, SPI_OK_SELECT);
	else
		n = orch_args_sql(&a, BOUND_TENANTS_SQL, false, 0, SPI_OK_SELECT);
	keys = orch_spi_column(1);
	fc->keys = palloc(sizeof(FairKey) * (n + 1));
	fc->nkeys = 0;
	for (uint64 i = 0; i < n; i++)
		add_key(fc, keys[i], false);
	a.n = 2;					/* the rest: $1, $2 */
	if (orch_args_sql(&a, fc->by_key ? REST_SQL(REST_KEY) : REST_SQL(REST_TENANT),
					  false, 1, SPI_OK_SELECT) > 0)
		add_key(fc, fc->by_key ? FAIR_NO_KEY : ORCH_DEFAULT_TENANT, true);
}

/* The keys' turns, from orch.fair_turns (a key without a row: weight 1, never served) */
static void
read_turns(FairClaim *fc)
{
	OrchArgs	a = {0};
	Datum	   *names = palloc(sizeof(Datum) * (fc->nkeys + 1));
	uint64		n;

	for (int i = 0; i < fc->nkeys; i++)
		names[i] = CStringGetTextDatum(fc->keys[i].key);
	orch_arg_text(&a, fc->queue);
	orch_arg(&a, TEXTARRAYOID,
			 PointerGetDatum(construct_array(names, fc->nkeys, TEXTOID, -1, false, TYPALIGN_INT)), false);
	n = orch_args_sql(&a, "SELECT fkey, weight, credit, served FROM orch.fair_turns"
					  " WHERE queue = $1 AND fkey = ANY ($2)", false, 0, SPI_OK_SELECT);
	for (uint64 r = 0; r < n; r++)
	{
		char	   *key = SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1);
		bool		isnull;

		for (int i = 0; i < fc->nkeys; i++)
		{
			FairKey    *k = &fc->keys[i];
			Datum		d;

			if (strcmp(k->key, key) != 0)
				continue;
			k->weight = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull));
			d = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 3, &isnull);
			k->credit = isnull ? 0 : DatumGetInt32(d);
			d = SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 4, &isnull);
			k->served = !isnull;
			k->stamp = isnull ? 0 : DatumGetInt64(d);
		}
	}
	for (int i = 0; i < fc->nkeys; i++)
		if (fc->keys[i].credit <= 0 || fc->keys[i].credit > fc->keys[i].weight)
			fc->keys[i].credit = fc->keys[i].weight;
}

/* Turn order: never served first, then served longest ago; then by key */
static int
turn_cmp(const void *a, const void *b)
{
	const FairKey *x = (const FairKey *) a;
	const FairKey *y = (const FairKey *) b;

	if (x->served != y->served)
		return x->served ? 1 : -1;
	if (x->served && x->stamp != y->stamp)
		return x->stamp < y->stamp ? -1 : 1;
	return strcmp(x->key, y->key);
}

/*
 * What to ask of each key: the rest of its turn first, then its weight per
 * round, in turn order, until the claim's tasks are shared out.
 */
static void
share_out(FairClaim *fc)
{
	int			left = fc->allowed;

	for (int round = 0; left > 0; round++)
		for (int i = 0; i < fc->nkeys && left > 0; i++)
		{
			FairKey    *k = &fc->keys[i];
			int			t = Min(round == 0 ? k->credit : k->weight, left);

			k->take += t;
			left -= t;
		}
}

/* One candidate while the heads are read */
typedef struct FairCand
{
	int64		id;
	char	   *owner;
	char	   *tenant;
	int			key;			/* index in fc->keys */
	int			rank;			/* its place among its key's candidates */
} FairCand;

static int
cand_cmp(const void *a, const void *b)
{
	const FairCand *x = (const FairCand *) a;
	const FairCand *y = (const FairCand *) b;

	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return x->key < y->key ? -1 : (x->key > y->key);
}

/* The ids a pass must not take again (those taken), as $5 */
static Datum
taken_ids(FairCand *c, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * (n + 1));

	for (int i = 0; i < n; i++)
		d[i] = Int64GetDatum(c[i].id);
	return PointerGetDatum(construct_array(d, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/* Append the rows of the last heads statement (key index: i - 1, or rest) */
static int
collect(FairClaim *fc, FairCand *c, int n, const int *key_of, int rest)
{
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	td = SPI_tuptable->tupdesc;
		bool		isnull;
		int			k = rest >= 0 ? rest : key_of[DatumGetInt64(SPI_getbinval(tup, td, 4, &isnull)) - 1];

		c[n].id = DatumGetInt64(SPI_getbinval(tup, td, 1, &isnull));
		c[n].owner = SPI_getvalue(tup, td, 2);
		c[n].tenant = SPI_getvalue(tup, td, 3);
		c[n].key = k;
		c[n].rank = fc->keys[k].got++;
		n++;
	}
	return n;
}

/*
 * One pass: the heads of every key asked for some (want[i]), not those
 * taken already; appended to c (n so far); returns the new count.
 */
static int
read_heads(FairClaim *fc, const int *want, FairCand *c, int n)
{
	OrchArgs	a = {0};
	Datum	   *keys = palloc(sizeof(Datum) * (fc->nkeys + 1));
	Datum	   *takes = palloc(sizeof(Datum) * (fc->nkeys + 1));
	int		   *key_of = palloc(sizeof(int) * (fc->nkeys + 1));
	int			nk = 0;
	int			rest = -1;

	for (int i = 0; i < fc->nkeys; i++)
	{
		if (want[i] <= 0)
			continue;
		if (fc->keys[i].rest)
		{
			rest = i;
			continue;
		}
		keys[nk] = CStringGetTextDatum(fc->keys[i].key);
		takes[nk] = Int32GetDatum(want[i]);
		key_of[nk++] = i;
	}
	orch_arg_text(&a, fc->queue);
	arg_tenants(&a, fc->tenants);
	orch_arg(&a, TEXTARRAYOID,
			 PointerGetDatum(construct_array(keys, nk, TEXTOID, -1, false, TYPALIGN_INT)), false);
	orch_arg(&a, INT4ARRAYOID,
			 PointerGetDatum(construct_array(takes, nk, INT4OID, 4, true, TYPALIGN_INT)), false);
	orch_arg(&a, INT8ARRAYOID, taken_ids(c, n), false);
	if (nk > 0)
	{
		orch_args_sql(&a, fc->by_key ? HEADS_KEY : HEADS_TENANT, false, 0, SPI_OK_SELECT);
		n = collect(fc, c, n, key_of, -1);
	}
	if (rest >= 0)
	{
		OrchArgs	r = {0};

		orch_arg_text(&r, fc->queue);
		arg_tenants(&r, fc->tenants);
		orch_arg_int4(&r, want[rest]);
		orch_arg(&r, INT8ARRAYOID, taken_ids(c, n), false);
		orch_args_sql(&r, fc->by_key ? REST_HEADS_SQL(REST_KEY) : REST_HEADS_SQL(REST_TENANT),
					  false, 0, SPI_OK_SELECT);
		n = collect(fc, c, n, key_of, rest);
	}
	return n;
}

/*
 * The second pass of a claim the first left short: what is left, shared
 * among the keys that gave all they were asked (they may have more), a
 * weight at a time.  False when there is none to ask.
 */
static bool
share_rest(FairClaim *fc, int have, int *want)
{
	int			left = fc->allowed - have;
	bool		any = false;

	for (int i = 0; i < fc->nkeys; i++)
	{
		want[i] = 0;
		any |= fc->keys[i].got >= fc->keys[i].take && fc->keys[i].take > 0;
	}
	if (!any || left <= 0)
		return false;
	while (left > 0)
		for (int i = 0; i < fc->nkeys && left > 0; i++)
			if (fc->keys[i].got >= fc->keys[i].take && fc->keys[i].take > 0)
			{
				int			t = Min(fc->keys[i].weight, left);

				want[i] += t;
				left -= t;
			}
	return true;
}

/*
 * The candidates of a fair claim of up to allowed tasks of queue (the
 * claim's tenants, (Datum) 0 for all), locked, in claim order: the keys'
 * heads in turn.  The caller claims those it may (orch_fair_served then
 * records the turns).  Caller is connected to SPI.
 */
FairClaim *
orch_fair_pick(const char *queue, const QueueSettings *qs, int allowed, Datum tenants)
{
	FairClaim  *fc = palloc0(sizeof(FairClaim));
	FairCand   *c;
	int		   *want;
	int			n = 0;

	fc->queue = queue;
	fc->by_key = qs->fair_by_key;
	fc->tenants = tenants;
	fc->allowed = allowed;
	find_keys(fc, tenants == (Datum) 0);
	if (fc->nkeys == 0)
		return fc;
	read_turns(fc);
	qsort(fc->keys, fc->nkeys, sizeof(FairKey), turn_cmp);
	share_out(fc);

	c = palloc(sizeof(FairCand) * (allowed + 1));
	want = palloc(sizeof(int) * fc->nkeys);
	for (int i = 0; i < fc->nkeys; i++)
		want[i] = fc->keys[i].take;
	n = read_heads(fc, want, c, 0);
	if (n < allowed && share_rest(fc, n, want))
	{
		for (int i = 0; i < fc->nkeys; i++)
			fc->keys[i].take += want[i];
		n = read_heads(fc, want, c, n);
	}
	qsort(c, n, sizeof(FairCand), cand_cmp);

	fc->n = n;
	fc->ids = palloc(sizeof(int64) * (n + 1));
	fc->owners = palloc(sizeof(char *) * (n + 1));
	fc->cand_tenants = palloc(sizeof(char *) * (n + 1));
	fc->cand_key = palloc(sizeof(int) * (n + 1));
	for (int i = 0; i < n; i++)
	{
		fc->ids[i] = c[i].id;
		fc->owners[i] = c[i].owner;
		fc->cand_tenants[i] = c[i].tenant;
		fc->cand_key[i] = c[i].key;
	}
	return fc;
}

/* The candidates: how many, and each one's id, owner and tenant */
int
orch_fair_candidates(FairClaim *fc, int64 **ids, char ***owners, char ***tenants)
{
	*ids = fc->ids;
	*owners = fc->owners;
	*tenants = fc->cand_tenants;
	return fc->n;
}

/*
 * Record the turns the claim used: claimed[i] says whether candidate i was
 * claimed.  A key the claim took nothing of keeps its turn.  A key that
 * gave all it was asked and has turn left keeps its place with less
 * credit; otherwise its turn ends (served now, credit its weight).  Each
 * key's row is written only under its advisory lock, tried once: a claim
 * running beside this one that holds it records that key's turn itself.
 */
void
orch_fair_served(FairClaim *fc, const bool *claimed)
{
	OrchArgs	a = {0};
	Datum	   *keys = palloc(sizeof(Datum) * (fc->nkeys + 1));
	Datum	   *credits = palloc(sizeof(Datum) * (fc->nkeys + 1));
	Datum	   *ends = palloc(sizeof(Datum) * (fc->nkeys + 1));
	int			nk = 0;

	for (int i = 0; i < fc->n; i++)
		if (claimed[i])
			fc->keys[fc->cand_key[i]].claimed++;
	for (int i = 0; i < fc->nkeys; i++)
	{
		FairKey    *k = &fc->keys[i];
		bool		end;

		if (k->claimed == 0 || !orch_xact_try_lock("fair", fc->queue, k->key))
			continue;
		end = k->claimed < k->take || k->claimed >= k->credit;
		keys[nk] = CStringGetTextDatum(k->key);
		credits[nk] = Int32GetDatum(end ? k->weight : k->credit - k->claimed);
		ends[nk++] = BoolGetDatum(end);
	}
	if (nk == 0)
		return;
	orch_arg_text(&a, fc->queue);
	orch_arg(&a, TEXTARRAYOID,
			 PointerGetDatum(construct_array(keys, nk, TEXTOID, -1, false, TYPALIGN_INT)), false);
	orch_arg(&a, INT4ARRAYOID,
			 PointerGetDatum(construct_array(credits, nk, INT4OID, 4, true, TYPALIGN_INT)), false);
	orch_arg(&a, BOOLARRAYOID,
			 PointerGetDatum(construct_array(ends, nk, BOOLOID, 1, true, TYPALIGN_CHAR)), false);
	orch_args_sql(&a, "INSERT INTO orch.fair_turns AS f (queue, fkey, credit, served, served_at)"
				  " SELECT $1, x.key, x.credit,"
				  "  CASE WHEN x.ends THEN pg_catalog.nextval('orch.fair_turns_served_seq') END,"
				  "  statement_timestamp()"
				  " FROM ROWS FROM (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::int[]),"
				  "  pg_catalog.unnest($4::bool[])) AS x(key, credit, ends)"
				  " ON CONFLICT (queue, fkey) DO UPDATE SET credit = excluded.credit,"
				  "  served = coalesce(excluded.served, f.served), served_at = excluded.served_at",
				  false, 0, SPI_OK_INSERT);
}
