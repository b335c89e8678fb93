/*
 * definition_internal.h
 *	  What the definition validator (definition_validate.c) takes from the
 *	  checks of single values (definition_values.c): reporting OR008 with a
 *	  JSON path, paths, and the value checks.
 */
#ifndef DEFINITION_INTERNAL_H
#define DEFINITION_INTERNAL_H

#include "orchestrator.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#define DEF_SHOW_LEN		64		/* bytes of a user string quoted in a message */

extern int orch_def_check_choice(JsonbValue *v, const char *path, const char *key, const char *const *choices);
extern int32 orch_def_check_int(JsonbValue *v, const char *path, const char *key, int32 min);
extern int64 orch_def_check_interval(JsonbValue *v, const char *path, const char *key);
extern void orch_def_check_keys(JsonbContainer *obj, const char *path, const char *const *allowed, const char *what);
extern char *orch_def_check_name(JsonbValue *v, const char *path, const char *key, int maxlen);
extern void orch_def_check_queue(JsonbValue *v, const char *path, const char *key);
extern void orch_def_check_signal(JsonbValue *v, const char *path);
extern JsonbValue *orch_def_check_retry_policy(JsonbValue *v, const char *path);
extern void orch_def_check_safety(JsonbValue *v, const char *path, JsonbValue *policy_safety);
extern void orch_def_check_text(JsonbValue *v, const char *path, const char *key);
extern void orch_def_fail(const char *path, const char *hint, const char *fmt,...) pg_attribute_printf(3, 4) pg_attribute_noreturn();
extern int *orch_def_first_occurrences(const char **strs, const int *lens, int n);
extern JsonbValue *orch_def_get(JsonbContainer *obj, const char *key);
extern bool orch_def_is_array(JsonbValue *v);
extern bool orch_def_is_object(JsonbValue *v);
extern const char *orch_def_kind(JsonbValue *v);
extern char *orch_def_path_idx(const char *parent, int i);
extern char *orch_def_path_key(const char *parent, const char *key);
extern char *orch_def_path_key_len(const char *parent, const char *key, int len);
extern char *orch_def_show(const char *s, int len);
extern char *orch_def_show_value(JsonbValue *v);

#endif							/* DEFINITION_INTERNAL_H */
