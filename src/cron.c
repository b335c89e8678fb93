/*
 * cron.c
 *	  Five-field cron expressions: parsing (22023 naming the field) and the
 *	  next fire time after an instant in a time zone, with PostgreSQL's own
 *	  time-zone conversions (pg_tzset, timestamp2tm, tm2timestamp).  A slot
 *	  is a wall-clock time the expression matches: one that a daylight-saving
 *	  gap skips fires at the instant it is pushed to (by the gap: 02:30 ->
 *	  03:30 local), one that a repeat shows twice fires once, at its first
 *	  occurrence.
 */
#include "postgres.h"

#include <ctype.h>

#include "datatype/timestamp.h"
#include "pgtime.h"
#include "utils/datetime.h"
#include "utils/timestamp.h"

#include "orchestrator.h"

/* A field's bounds and names */
typedef struct CronField
{
	const char *name;
	int			min;
	int			max;
	const char *const *names;	/* NULL, or max - min + 1 names from min */
} CronField;

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun",
"jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const dow_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

static const CronField fields[5] = {
	{"minute", 0, 59, NULL},
	{"hour", 0, 23, NULL},
	{"day-of-month", 1, 31, NULL},
	{"month", 1, 12, month_names},
	{"day-of-week", 0, 7, dow_names},	/* 7 is Sunday too */
};

/* Longest cron expression accepted */
#define CRON_MAX_LEN 256
/* How far ahead a next fire time is looked for */
#define CRON_MAX_YEARS 10

static void pg_attribute_noreturn()
field_error(const char *expr, int f, const char *text, const char *problem)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid %s field \"%s\" in cron expression \"%s\"", fields[f].name, text, expr),
			 errdetail("%s", problem),
			 errhint("The fields are minute (0-59), hour (0-23), day-of-month (1-31), month (1-12 or jan-dec) and day-of-week (0-7 or sun-sat, 0 and 7 are Sunday).")));
}

/* One value of field f: a number or a name; -1 when it is neither. */
static int
field_value(int f, const char *s, int len)
{
	int			v = 0;

	if (len <= 0)
		return -1;
	if (isdigit((unsigned char) s[0]))
	{
		for (int i = 0; i < len; i++)
		{
			if (!isdigit((unsigned char) s[i]) || v > 1000)
				return -1;
			v = v * 10 + (s[i] - '0');
		}
		return v;
	}
	if (fields[f].names != NULL && len == 3)
		for (int i = 0; i <= fields[f].max - fields[f].min && i < (f == 4 ? 7 : 12); i++)
			if (pg_strncasecmp(s, fields[f].names[i], 3) == 0)
				return fields[f].min + i;
	return -1;
}

/* A number within the field's bounds, else 22023 */
static int
bounded_value(const char *expr, int f, const char *text, const char *s, int len)
{
	int			v = field_value(f, s, len);

	if (v < 0)
		field_error(expr, f, text, psprintf("\"%.*s\" is not a number%s.", len, s,
											fields[f].names ? " or a name" : ""));
	if (v < fields[f].min || v > fields[f].max)
		field_error(expr, f, text, psprintf("%d is out of range %d-%d.", v, fields[f].min,
											fields[f].max));
	return v;
}

/*
 * One comma-separated item: "*", "N", "N-M", each optionally "/STEP"
 * ("N/STEP" runs from N to the field's maximum).  Sets its bits.
 */
static void
parse_item(const char *expr, int f, const char *text, const char *item, int len, uint64 *bits)
{
	const char *slash = memchr(item, '/', len);
	int			blen = slash ? slash - item : len;
	int			lo,
				hi,
				step = 1;
	const char *dash = memchr(item, '-', blen);

	if (len == 0)
		field_error(expr, f, text, "A list item is empty.");
	if (slash)
	{
		step = field_value(f, slash + 1, len - blen - 1);
		if (step < 1 || step > fields[f].max)
			field_error(expr, f, text, psprintf("The step \"%.*s\" must be a number from 1 to %d.",
												len - blen - 1, slash + 1, fields[f].max));
	}
	if (blen == 1 && item[0] == '*')
	{
		lo = fields[f].min;
		hi = fields[f].max;
	}
	else if (dash)
	{
		lo = bounded_value(expr, f, text, item, dash - item);
		hi = bounded_value(expr, f, text, dash + 1, blen - (dash - item) - 1);
		if (lo > hi)
			field_error(expr, f, text, psprintf("The range %d-%d runs backwards.", lo, hi));
	}
	else
	{
		lo = bounded_value(expr, f, text, item, blen);
		hi = slash ? fields[f].max : lo;
	}
	for (int v = lo; v <= hi; v += step)
		*bits |= UINT64CONST(1) << (f == 4 && v == 7 ? 0 : v);
}

/* One field (its text between spaces) into its bits */
static uint64
parse_field(const char *expr, int f, const char *text)
{
	uint64		bits = 0;
	const char *p = text;

	for (;;)
	{
		const char *comma = strchr(p, ',');
		int			len = comma ? comma - p : strlen(p);

		parse_item(expr, f, text, p, len, &bits);
		if (!comma)
			break;
		p = comma + 1;
	}
	return bits;
}

/* The @-shorthands of Vixie cron, or NULL */
static const char *
shorthand(const char *expr)
{
	static const char *const map[][2] = {
		{"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
		{"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"}, {"@midnight", "0 0 * * *"},
		{"@hourly", "0 * * * *"},
	};

	for (int i = 0; i < lengthof(map); i++)
		if (pg_strcasecmp(expr, map[i][0]) == 0)
			return map[i][1];
	return NULL;
}

/*
 * Parse a cron expression: five fields separated by white space, or an
 * @-shorthand.  22023 naming the field that does not parse.
 */
void
orch_cron_parse(const char *expr, OrchCron *c)
{
	char	   *copy;
	char	   *tok[5];
	int			n = 0;
	const char *text = expr;
	uint64		bits[5];

	if (strlen(expr) > CRON_MAX_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cron expression must have at most %d characters", CRON_MAX_LEN)));
	if (expr[0] == '@' && shorthand(expr) == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown cron shorthand \"%s\"", expr),
				 errhint("Use @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly.")));
	if (expr[0] == '@')
		text = shorthand(expr);
	copy = pstrdup(text);
	for (char *p = strtok(copy, " \t\n\r"); p != NULL; p = strtok(NULL, " \t\n\r"))
	{
		if (n < 5)
			tok[n] = p;
		n++;
	}
	if (n != 5)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cron expression \"%s\" has %d fields, not 5", expr, n),
				 errhint("The fields are minute, hour, day-of-month, month and day-of-week.")));
	for (int f = 0; f < 5; f++)
		bits[f] = parse_field(expr, f, tok[f]);
	c->minutes = bits[0];
	c->hours = (uint32) bits[1];
	c->days = (uint32) bits[2];
	c->months = (uint16) bits[3];
	c->dows = (uint8) bits[4];
	/* Vixie cron: a field that starts with '*' leaves the days to the other */
	c->dom_star = tok[2][0] == '*';
	c->dow_star = tok[4][0] == '*';
	pfree(copy);
}

/* The time zone of a name (IANA, as the TimeZone setting takes), else 22023 */
pg_tz *
orch_cron_timezone(const char *name)
{
	pg_tz	   *tz = strlen(name) < TZ_STRLEN_MAX ? pg_tzset(name) : NULL;

	if (tz == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("time zone \"%s\" not recognized", name),
				 errhint("Use an IANA time zone name such as \"UTC\" or \"Europe/Berlin\" (pg_timezone_names).")));
	return tz;
}

/*
 * Wall-clock time as a plain timestamp (its fields as if in UTC): the local
 * time of instant u in tz.
 */
static Timestamp
local_of(TimestampTz u, pg_tz *tz)
{
	struct pg_tm tm;
	fsec_t		fsec;
	int			tzoff;
	Timestamp	out;

	if (timestamp2tm(u, &tzoff, &tm, &fsec, NULL, tz) != 0 ||
		tm2timestamp(&tm, fsec, NULL, &out) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
	return out;
}

/*
 * The instant of wall-clock time w in tz after the instant after, or
 * DT_NOBEGIN when there is none: the earlier of the offsets around it that
 * gives w back (a repeated time: its first occurrence, unless that is not
 * after `after`); w in a gap: with the offset before the gap, the instant
 * the clock jumped past it.
 */
static TimestampTz
instant_of(Timestamp w, pg_tz *tz, TimestampTz after)
{
	int64		before = local_of(w - USECS_PER_DAY, tz) - (w - USECS_PER_DAY);
	int64		later = local_of(w + USECS_PER_DAY, tz) - (w + USECS_PER_DAY);
	TimestampTz a = w - before;
	TimestampTz b = w - later;
	bool		a_ok = local_of(a, tz) == w && a > after;
	bool		b_ok = local_of(b, tz) == w && b > after;

	if (a_ok && b_ok)
		return Min(a, b);
	if (a_ok || b_ok)
		return a_ok ? a : b;
	if (local_of(a, tz) != w && local_of(b, tz) != w && a > after)
		return a;				/* in a gap */
	return DT_NOBEGIN;
}

/* Does the day match (day-of-month and day-of-week, OR when both restricted)? */
static bool
day_matches(const OrchCron *c, int y, int m, int d)
{
	bool		dom = (c->days & (((uint32) 1) << d)) != 0;
	bool		dow = (c->dows & (1 << j2day(date2j(y, m, d)))) != 0;

	if (c->dom_star || c->dow_star)
		return dom && dow;
	return dom || dow;
}

/* A wall-clock time, field by field (minute may be 60: the next hour) */
typedef struct Wall
{
	int			y,
				m,
				d,
				h,
				mi;
} Wall;

/*
 * Move w to the first wall-clock time at or after it that c matches; false
 * past the year last_year.
 */
static bool
next_wall(const OrchCron *c, Wall *w, int last_year)
{
	while (w->y <= last_year)
	{
		if (!(c->months & (1 << w->m)) || w->d > day_tab[isleap(w->y)][w->m - 1])
		{
			/* the first day of the next month */
			w->d = 1, w->h = 0, w->mi = 0;
			if (++w->m > 12)
				w->y++, w->m = 1;
		}
		else if (!day_matches(c, w->y, w->m, w->d))
			w->d++, w->h = 0, w->mi = 0;
		else if (w->h > 23)
			w->d++, w->h = 0, w->mi = 0;
		else if (!(c->hours & (((uint32) 1) << w->h)) || w->mi > 59)
			w->h++, w->mi = 0;
		else if (!(c->minutes & (UINT64CONST(1) << w->mi)))
			w->mi++;
		else
			return true;
	}
	return false;
}

/*
 * The wall-clock time the search for the slot after the instant after
 * starts from: the minute after its local time, or after the local time
 * it would have without a daylight-saving jump in the three hours before
 * it, whichever is earlier (so that the slots a spring-forward gap pushed
 * past after are found).
 */
static Wall
search_start(TimestampTz after, pg_tz *tz)
{
	int64		back = 3 * USECS_PER_HOUR;
	Timestamp	start = Min(local_of(after, tz), local_of(after - back, tz) + back);
	struct pg_tm tm;
	fsec_t		fsec;
	Wall		w;

	if (timestamp2tm(start, NULL, &tm, &fsec, NULL, NULL) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
	w.y = tm.tm_year, w.m = tm.tm_mon, w.d = tm.tm_mday, w.h = tm.tm_hour, w.mi = tm.tm_min + 1;
	return w;
}

/*
 * The first slot of c strictly after the instant after, in tz; false when
 * there is none within ten years (e.g. "0 0 30 2 *").
 */
bool
orch_cron_slot_after(const OrchCron *c, pg_tz *tz, TimestampTz after, TimestampTz *next)
{
	Wall		w;
	int			last_year;

	if (TIMESTAMP_NOT_FINITE(after))
		return false;
	w = search_start(after, tz);
	last_year = w.y + CRON_MAX_YEARS;
	while (next_wall(c, &w, last_year))
	{
		struct pg_tm tm = {0};
		Timestamp	wall;
		TimestampTz at;

		tm.tm_year = w.y, tm.tm_mon = w.m, tm.tm_mday = w.d, tm.tm_hour = w.h, tm.tm_min = w.mi;
		if (tm2timestamp(&tm, 0, NULL, &wall) != 0)
			return false;
		at = instant_of(wall, tz, after);
		if (at != DT_NOBEGIN)
		{
			*next = at;
			return true;
		}
		w.mi++;
	}
	return false;
}
