# orchestrator: PGXS build.  `make && make install`; every test suite:
# scripts/test.sh (README.md, "Quick start").
EXTENSION  = orchestrator
MODULE_big = orchestrator
OBJS       = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c)))
DATA       = $(sort $(wildcard sql/orchestrator--*.sql))
PGFILEDESC = "orchestrator - durable work orchestration for PostgreSQL"

# pg_regress: test/sql/NAME.sql + test/expected/NAME.out
REGRESS        = $(patsubst test/sql/%.sql,%,$(sort $(wildcard test/sql/*.sql)))
REGRESS_OPTS   = --inputdir=test --outputdir=results-regress
# pg_isolation_regress: test/specs/NAME.spec + test/expected/NAME.out
ISOLATION      = $(patsubst test/specs/%.spec,%,$(sort $(wildcard test/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test --outputdir=results-isolation
# Perl TAP tests in t/ (scripts/test.sh runs them as the postgres OS user)
TAP_TESTS  = 1

EXTRA_CLEAN = results-regress results-isolation tmp_check

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
