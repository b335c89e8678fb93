/*
 * claim_fair.c
 *	  Which tasks a claim of a queue with "fairness": "round_robin" takes:
 *	  the heads of the keys that have claimable work (tenants, or concurrency
 *	  keys: the queue's fairness_key), each key in turn, and where the next
 *	  claim starts.
 *
 *	  The keys take turns in the order of their names, a cycle: a claim
 *	  starts after the key the last one ended on (the queue's row of
 *	  orch.fair_cursors; a turn cut short by the end of a claim goes on in
 *	  the next), and each key gives up to its weight (orch.fair_weights,
 *	  else 1) of tasks per turn.  The keys that follow are found by a loose
 *	  index scan from there, one index probe per key, so that a claim costs
 *	  what it takes, never the backlog behind a key nor the number of keys.
 *
 *	  Claims running side by side: each takes a transaction advisory lock on
 *	  each key it serves, tried once and never waited for; a key another
 *	  claim is serving is passed over (taken only when the claim would
 *	  otherwise come back short).  The cursor is written under its own lock,
 *	  tried once.  A claim that rolls back gives everything back: its turns
 *	  were never recorded.
 *
 *	  The tasks without a key of their own (the default tenant's, or those
 *	  without a concurrency key) are one more key, after every named one,
 *	  looked for among the queue's first FAIR_REST_PROBE claimable tasks:
 *	  the queue's claim index holds every tenant's tasks, and an index of
 *	  those tasks alone would cost every task.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "orchestrator.h"

/* claimable tasks of the queue the look for the rest reads */
#define FAIR_REST_PROBE		"1000"
/* keys looked at by one claim, beyond those it needs */
#define FAIR_KEYS_SLACK		4
#define FAIR_KEYS_MAX		10000

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

/*
 * Loose index scan: the keys with claimable work from the first (FROM "")
 * or after $3 (FROM AFTER), up to $4 ($5: inclusive; NULL: to the last), at
 * most $6.  Each probe is a range condition of the index, and the scan
 * stops at $4.
 */
#define AFTER(COL)	" AND c." COL " > $3"
#define KEYS_SQL(COL, KEYED, FROM) \
	"WITH RECURSIVE k(key) AS (" \
	"  (SELECT c." COL " FROM orch.tasks c WHERE " CLAIMABLE("c") " AND " KEYED("c") FROM \
	"   ORDER BY c.queue, c." COL " LIMIT 1)" \
	"  UNION ALL" \
	"  SELECT (SELECT c." COL " FROM orch.tasks c WHERE " CLAIMABLE("c") " AND " KEYED("c") \
	"          AND c." COL " > k.key ORDER BY c.queue, c." COL " LIMIT 1)" \
	"    FROM k WHERE k.key IS NOT NULL AND ($4::text IS NULL OR k.key < $4))" \
	" SELECT key FROM k WHERE key IS NOT NULL" \
	"   AND ($4::text IS NULL OR key < $4 OR ($5 AND key = $4)) LIMIT $6"
#define TENANTS_FROM_FIRST	KEYS_SQL("tenant_id", TENANT_KEYED, "")
#define TENANTS_AFTER		KEYS_SQL("tenant_id", TENANT_KEYED, AFTER("tenant_id"))
#define KEYS_FROM_FIRST		KEYS_SQL("concurrency_key", KEY_KEYED, "")
#define KEYS_AFTER			KEYS_SQL("concurrency_key", KEY_KEYED, AFTER("concurrency_key"))

/* Has key $3 claimable work? */
#define KEY_PROBE_SQL(COL, KEYED) \
	"SELECT 1 FROM orch.tasks c WHERE " CLAIMABLE("c") " AND " KEYED("c") " AND c." COL " = $3 LIMIT 1"

/* The queue's first claimable tasks: where the rest is looked for */
#define FIRST_CLAIMABLE \
	"ARRAY(SELECT x.id FROM orch.tasks x WHERE x.queue = $1" ORCH_AT_QUEUE_KEY("x", "$1") \
	" AND x.ready_at <= " ORCH_NOW \
	" ORDER BY x.priority, x.created_at, x.id LIMIT " FAIR_REST_PROBE ")"
#define REST_TENANT(T)	T ".tenant_id = '" ORCH_DEFAULT_TENANT "'"
#define REST_KEY(T)		T ".concurrency_key IS NULL"
#define REST_SQL(REST) \
	"SELECT 1 FROM (SELECT c.tenant_id, c.concurrency_key FROM orch.tasks c" \
	"  WHERE c.queue = $1" ORCH_AT_QUEUE_KEY("c", "$1") " AND c.ready_at <= " ORCH_NOW \
	"  ORDER BY c.priority, c.created_at, c.id LIMIT " FAIR_REST_PROBE ") c" \
	" WHERE " ORCH_TENANT_IN("c.tenant_id", "$2") " AND " REST("c") " LIMIT 1"

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

/* One key of a fair claim */
typedef struct FairKey
{
	char	   *key;			/* NULL: the rest */
	int32		weight;
	int32		turn;			/* its turn's size in this claim (the cursor's
								 * credit when its turn goes on) */
	bool		busy;			/* another claim is serving it */
	int32		take;			/* asked of it */
	int32		got;			/* candidates it gave */
} FairKey;

/* One grant: a key asked for amount tasks, its turn left after it */
typedef struct FairGrant
{
	int			key;
	int32		amount;
	int32		left;
} FairGrant;

/* One candidate while the heads are read */
typedef struct FairCand
{
	int64		id;
	char	   *owner;
	char	   *tenant;
	int			key;			/* index in fc->keys */
	int			rank;			/* its place among its key's candidates */
} FairCand;

struct FairClaim
{
	const char *queue;
	bool		by_key;			/* fairness_key concurrency_key */
	Datum		tenants;		/* $2: text[], (Datum) 0 for all */
	int			allowed;
	FairKey    *keys;			/* in turn order */
	int			nkeys;
	int			maxkeys;
	FairGrant  *grants;
	int			ngrants;
	/* the candidates, in claim order */
	int			n;
	int64	   *ids;
	char	  **owners;
	char	  **cand_tenants;
	int		   *cand_key;
};

/* Where the last claim ended: its key (NULL: the rest), the turn left */
typedef struct FairCursor
{
	bool		set;
	char	   *key;
	int32		credit;
} FairCursor;

static void
arg_tenants(OrchArgs *a, Datum tenants)
{
	orch_arg(a, TEXTARRAYOID, tenants, tenants == (Datum) 0);
}

static Datum
text_array(char **s, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * (n + 1));

	for (int i = 0; i < n; i++)
		d[i] = CStringGetTextDatum(s[i]);
	return PointerGetDatum(construct_array(d, n, TEXTOID, -1, false, TYPALIGN_INT));
}

static void
add_key(FairClaim *fc, const char *key, int32 turn)
{
	FairKey    *k;

	if (fc->nkeys >= fc->maxkeys)
		return;
	k = &fc->keys[fc->nkeys++];
	memset(k, 0, sizeof(*k));
	k->key = key ? pstrdup(key) : NULL;
	k->weight = 1;
	k->turn = turn;
}

/*
 * Append the named keys with claimable work after `after` (NULL: from the
 * first), before `upto` (NULL: to the last; inclusive: up to and with it).
 */
static void
named_keys(FairClaim *fc, const char *after, const char *upto, bool inclusive)
{
	OrchArgs	a = {0};
	uint64		n;
	char	  **keys;

	if (fc->nkeys >= fc->maxkeys)
		return;
	orch_arg_text(&a, fc->queue);
	arg_tenants(&a, fc->tenants);
	orch_arg_text(&a, after);
	orch_arg_text(&a, upto);
	orch_arg_bool(&a, inclusive);
	orch_arg_int4(&a, fc->maxkeys - fc->nkeys);
	if (after)
		n = orch_args_sql(&a, fc->by_key ? KEYS_AFTER : TENANTS_AFTER, false, 0, SPI_OK_SELECT);
	else
		n = orch_args_sql(&a, fc->by_key ? KEYS_FROM_FIRST : TENANTS_FROM_FIRST,
						  false, 0, SPI_OK_SELECT);
	keys = orch_spi_column(1);
	for (uint64 i = 0; i < n; i++)
		add_key(fc, keys[i], 0);
}

/* Has this named key claimable work? */
static bool
key_has_work(FairClaim *fc, const char *key)
{
	OrchArgs	a = {0};

	orch_arg_text(&a, fc->queue);
	arg_tenants(&a, fc->tenants);
	orch_arg_text(&a, key);
	return orch_args_sql(&a, fc->by_key ? KEY_PROBE_SQL("concurrency_key", KEY_KEYED)
						 : KEY_PROBE_SQL("tenant_id", TENANT_KEYED), false, 1, SPI_OK_SELECT) > 0;
}

/* Append the rest, when it has claimable work */
static void
rest_key(FairClaim *fc, int32 turn)
{
	OrchArgs	a = {0};

	if (fc->nkeys >= fc->maxkeys)
		return;					/* the claim has keys enough before it */
	orch_arg_text(&a, fc->queue);
	arg_tenants(&a, fc->tenants);
	if (orch_args_sql(&a, fc->by_key ? REST_SQL(REST_KEY) : REST_SQL(REST_TENANT),
					  false, 1, SPI_OK_SELECT) > 0)
		add_key(fc, NULL, turn);
}

/* The queue's cursor (none: the cycle starts at the first key) */
static FairCursor
read_cursor(FairClaim *fc)
{
	FairCursor	c = {false, NULL, 0};
	OrchArgs	a = {0};
	bool		isnull;

	orch_arg_text(&a, fc->queue);
	if (orch_args_sql(&a, "SELECT fkey, credit FROM orch.fair_cursors WHERE queue = $1",
					  false, 1, SPI_OK_SELECT) == 0)
		return c;
	c.set = true;
	c.key = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	c.credit = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	return c;
}

/*
 * The keys in turn order from the cursor: the key whose turn goes on, the
 * named keys after it, the rest, then from the first named key round to
 * the cursor's (the cursor's last when its turn ended).
 */
static void
find_keys(FairClaim *fc, FairCursor *cur)
{
	if (!cur->set)
	{
		named_keys(fc, NULL, NULL, false);
		rest_key(fc, 0);
		return;
	}
	if (cur->key == NULL)
	{
		if (cur->credit > 0)
			rest_key(fc, cur->credit);
		named_keys(fc, NULL, NULL, false);
		if (cur->credit <= 0)
			rest_key(fc, 0);
		return;
	}
	if (cur->credit > 0 && key_has_work(fc, cur->key))
		add_key(fc, cur->key, cur->credit);
	named_keys(fc, cur->key, NULL, false);
	rest_key(fc, 0);
	named_keys(fc, NULL, cur->key, cur->credit <= 0);
}

/* The keys' weights (orch.fair_weights; 1 without a row) */
static void
read_weights(FairClaim *fc)
{
	OrchArgs	a = {0};
	char	  **names = palloc(sizeof(char *) * (fc->nkeys + 1));
	int			n = 0;
	uint64		rows;

	for (int i = 0; i < fc->nkeys; i++)
		names[n++] = fc->keys[i].key ? fc->keys[i].key : fc->by_key ? "" : ORCH_DEFAULT_TENANT;
	orch_arg_text(&a, fc->queue);
	orch_arg(&a, TEXTARRAYOID, text_array(names, n), false);
	rows = orch_args_sql(&a, "SELECT fkey, weight FROM orch.fair_weights"
						 " WHERE queue = $1 AND fkey = ANY ($2)", false, 0, SPI_OK_SELECT);
	for (uint64 r = 0; r < rows; r++)
	{
		char	   *key = SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1);
		bool		isnull;
		int32		w = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull));

		for (int i = 0; i < fc->nkeys; i++)
			if (strcmp(names[i], key) == 0)
				fc->keys[i].weight = w;
	}
	for (int i = 0; i < fc->nkeys; i++)
		if (fc->keys[i].turn <= 0 || fc->keys[i].turn > fc->keys[i].weight)
			fc->keys[i].turn = fc->keys[i].weight;
}

/* Take the key's advisory lock, tried once: false when another claim serves it */
static bool
lock_key(FairClaim *fc, FairKey *k)
{
	return k->key ? orch_xact_try_lock("fair", fc->queue, k->key)
		: orch_xact_try_lock("fair-rest", fc->queue, NULL);
}

static void
grant(FairClaim *fc, int key, int32 amount, int32 turn)
{
	FairGrant  *g = &fc->grants[fc->ngrants++];

	g->key = key;
	g->amount = amount;
	g->left = turn - amount;
	fc->keys[key].take += amount;
}

/*
 * Share the claim's tasks out in turn order: each key its turn (the first
 * one's may be what is left of a turn under way), round after round; a key
 * another claim is serving is passed over.
 */
static void
share_out(FairClaim *fc)
{
	int			left = fc->allowed;
	bool		any = true;

	for (int round = 0; left > 0 && any; round++)
	{
		any = false;
		for (int i = 0; i < fc->nkeys && left > 0; i++)
		{
			FairKey    *k = &fc->keys[i];
			int32		turn = round == 0 ? k->turn : k->weight;

			if (round == 0)
				k->busy = !lock_key(fc, k);
			if (k->busy)
				continue;
			grant(fc, i, Min(turn, left), turn);
			left -= Min(turn, left);
			any = true;
		}
	}
}

/*
 * The second pass of a claim the first left short: what is left, a weight
 * at a time, to the keys that gave all they were asked (they may have
 * more), then to those other claims are serving.  False when none.
 */
static bool
share_rest(FairClaim *fc, int have, int *want)
{
	int			left = fc->allowed - have;
	bool		any = true;

	memset(want, 0, sizeof(int) * fc->nkeys);
	for (int pass = 0; pass < 2 && left > 0; pass++)
		for (any = true; left > 0 && any;)
		{
			any = false;
			for (int i = 0; i < fc->nkeys && left > 0; i++)
			{
				FairKey    *k = &fc->keys[i];
				bool		more = pass == 0 ? (!k->busy && k->take > 0 && k->got >= k->take)
					: k->busy;

				if (!more)
					continue;
				want[i] += Min(k->weight, left);
				grant(fc, i, Min(k->weight, left), k->weight);
				left -= Min(k->weight, left);
				any = true;
			}
		}
	return left < fc->allowed - have;
}

static int
cand_cmp(const void *a, const void *b)
{
	const FairCand *x = (const FairCand *) a;
	const FairCand *y = (const FairCand *) b;

	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return x->key < y->key ? -1 : (x->key > y->key);
}

/* The ids a pass must not take again (those taken) */
static Datum
taken_ids(FairCand *c, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * (n + 1));

	for (int i = 0; i < n; i++)
		d[i] = Int64GetDatum(c[i].id);
	return PointerGetDatum(construct_array(d, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/* Append the rows of the last heads statement (key: key_of[column 4 - 1], or rest) */
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
 * taken already, appended to c (n so far); returns the new count.
 */
static int
read_heads(FairClaim *fc, const int *want, FairCand *c, int n)
{
	OrchArgs	a = {0};
	char	  **keys = palloc(sizeof(char *) * (fc->nkeys + 1));
	Datum	   *takes = palloc(sizeof(Datum) * (fc->nkeys + 1));
	int		   *key_of = palloc(sizeof(int) * (fc->nkeys + 1));
	int			nk = 0;
	int			rest = -1;

	for (int i = 0; i < fc->nkeys; i++)
	{
		if (want[i] <= 0)
			continue;
		if (fc->keys[i].key == NULL)
		{
			rest = i;
			continue;
		}
		keys[nk] = fc->keys[i].key;
		takes[nk] = Int32GetDatum(want[i]);
		key_of[nk++] = i;
	}
	if (nk > 0)
	{
		orch_arg_text(&a, fc->queue);
		arg_tenants(&a, fc->tenants);
		orch_arg(&a, TEXTARRAYOID, text_array(keys, nk), false);
		orch_arg(&a, INT4ARRAYOID,
				 PointerGetDatum(construct_array(takes, nk, INT4OID, 4, true, TYPALIGN_INT)), false);
		orch_arg(&a, INT8ARRAYOID, taken_ids(c, n), false);
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

/* The candidates, in claim order: each key's first, then each one's second, ... */
static void
set_candidates(FairClaim *fc, FairCand *c, int n)
{
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
}

/*
 * The candidates of a fair claim of up to allowed tasks of queue (the
 * claim's tenants, (Datum) 0 for all), locked, in claim order.  The caller
 * claims those it may, then tells orch_fair_served which.  Caller is
 * connected to SPI.
 */
FairClaim *
orch_fair_pick(const char *queue, const QueueSettings *qs, int allowed, Datum tenants)
{
	FairClaim  *fc = palloc0(sizeof(FairClaim));
	FairCursor	cur;
	FairCand   *c;
	int		   *want;
	int			n;

	fc->queue = queue;
	fc->by_key = qs->fair_by_key;
	fc->tenants = tenants;
	fc->allowed = allowed;
	fc->maxkeys = Min(allowed + FAIR_KEYS_SLACK, FAIR_KEYS_MAX);
	fc->keys = palloc(sizeof(FairKey) * (fc->maxkeys + 1));
	cur = read_cursor(fc);
	find_keys(fc, &cur);
	if (fc->nkeys == 0)
		return fc;
	read_weights(fc);
	fc->grants = palloc(sizeof(FairGrant) * (2 * allowed + 2));
	share_out(fc);

	c = palloc(sizeof(FairCand) * (allowed + 1));
	want = palloc(sizeof(int) * fc->nkeys);
	for (int i = 0; i < fc->nkeys; i++)
		want[i] = fc->keys[i].take;
	n = read_heads(fc, want, c, 0);
	if (n < allowed && share_rest(fc, n, want))
		n = read_heads(fc, want, c, n);
	set_candidates(fc, c, n);
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
 * Where the next claim starts, from what this one took (claimed[i]: was
 * candidate i claimed): the key of the last grant that gave any, with the
 * rest of its turn when it gave all it was asked.  Written under the
 * cursor's advisory lock, tried once (a claim beside this one that holds it
 * writes it).  A claim that took nothing leaves it.
 */
void
orch_fair_served(FairClaim *fc, const bool *claimed)
{
	int32	   *rem = palloc0(sizeof(int32) * (fc->nkeys + 1));
	int			last = -1;
	bool		full = false;
	OrchArgs	a = {0};

	for (int i = 0; i < fc->n; i++)
		if (claimed[i])
			rem[fc->cand_key[i]]++;
	for (int g = 0; g < fc->ngrants; g++)
	{
		FairGrant  *gr = &fc->grants[g];
		int32		d = Min(gr->amount, rem[gr->key]);

		rem[gr->key] -= d;
		if (d > 0)
		{
			last = g;
			full = d == gr->amount;
		}
	}
	if (last < 0 || !orch_xact_try_lock("fair-cursor", fc->queue, NULL))
		return;
	orch_arg_text(&a, fc->queue);
	orch_arg_text(&a, fc->keys[fc->grants[last].key].key);
	orch_arg_int4(&a, full ? Max(fc->grants[last].left, 0) : 0);
	orch_args_sql(&a, "INSERT INTO orch.fair_cursors (queue, fkey, credit) VALUES ($1, $2, $3)"
				  " ON CONFLICT (queue) DO UPDATE SET fkey = excluded.fkey, credit = excluded.credit",
				  false, 0, SPI_OK_INSERT);
}
