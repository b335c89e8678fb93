# orchestrator: PGXS build.  `make && make install`; tests: see README.md.
EXTENSION  = orchestrator
MODULE_big = orchestrator
OBJS       = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c)))
DATA       = $(sort $(wildcard sql/orchestrator--*.sql))
PGFILEDESC = "orchestrator - durable work orchestration for PostgreSQL"

# pg_regress: sql/NAME.sql + expected/NAME.out (install scripts excluded)
REGRESS    = $(filter-out orchestrator--%,$(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql))))
REGRESS_OPTS = --inputdir=. --outputdir=results-regress
# pg_isolation_regress: specs/NAME.spec + expected/NAME.out
ISOLATION  = $(patsubst specs/%.spec,%,$(sort $(wildcard specs/*.spec)))
ISOLATION_OPTS = --inputdir=. --outputdir=results-isolation
# Perl TAP tests in t/ (run by test/run_all.sh as the postgres OS user)
TAP_TESTS  = 1

EXTRA_CLEAN = results-regress results-isolation tmp_check

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
