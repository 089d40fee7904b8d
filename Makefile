# ash_replicant — PGXS build.
#
#   make && make install        build and install into the server found by pg_config
#   make installcheck           pg_regress suite (temp instance) + TAP suite
#
# See README.md for the one-command test runner (tools/test.sh).

EXTENSION = ash_replicant
MODULE_big = ash_replicant
OBJS = $(patsubst %.c,%.o,$(wildcard src/*.c))

DATA = $(wildcard sql/ash_replicant--*.sql)

PGFILEDESC = "ash_replicant - fail-closed logical replication mirror"

REGRESS = $(sort $(basename $(notdir $(wildcard test/sql/*.sql))))
REGRESS_OPTS = --inputdir=test --outputdir=test --temp-instance=test/tmp_instance \
	--temp-config=test/regress.conf

TAP_TESTS = 1
PROVE_TESTS = $(if $(TAP),$(TAP),test/t/*.pl)
PROVE_FLAGS = -I test/t

PG_CONFIG ?= pg_config
PG_CPPFLAGS = -I$(libpq_srcdir) -Isrc -Wall -Wextra -Werror -Wno-unused-parameter \
	-Wno-missing-field-initializers -Wno-sign-compare
SHLIB_LINK = $(libpq) -lssl -lcrypto

EXTRA_CLEAN = test/results test/regression.diffs test/regression.out \
	test/tmp_instance test/log tmp_check

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
