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
SCRIPTS = tools/ash_replicant_ctl

PGFILEDESC = "ash_replicant - fail-closed logical replication mirror"

# pg_regress (PostgreSQL 15) looks for a test's files in --outputdir first,
# then in --inputdir: with the output in "." (PGXS's default, which its
# clean rule knows: results/, regression.diffs, log/) the expected output is
# the top-level expected/ and the SQL is found in test/sql (./sql/ holds the
# extension's install scripts, which no test is named after).
REGRESS = $(sort $(basename $(notdir $(wildcard test/sql/*.sql))))
REGRESS_OPTS = --inputdir=test --outputdir=. --temp-instance=test/tmp_instance \
	--temp-config=test/regress.conf

TAP_TESTS = 1
PROVE_TESTS = $(if $(TAP),$(TAP),test/t/*.pl)

PG_CONFIG ?= pg_config
PG_CPPFLAGS = -I$(libpq_srcdir) -Isrc -Wall -Wextra -Werror -Wno-unused-parameter \
	-Wno-missing-field-initializers -Wno-sign-compare
SHLIB_LINK = $(libpq) -lssl -lcrypto

EXTRA_CLEAN = test/tmp_instance tmp_check

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Two TAP files at a time (after the include: PGXS resets PROVE_FLAGS).
# Most of a TAP test's time is spent waiting for its servers, and the suite
# must end well inside CI's 30 minutes on two cores.  PROVE_JOBS=1 runs
# them one after the other.
PROVE_JOBS ?= 2
PROVE_FLAGS = --timer -j$(PROVE_JOBS)

# PGXS tracks no header dependencies: rebuild every object when any of our
# headers changes (a stale struct layout is a crash, not a warning).
$(OBJS): $(wildcard src/*.h)

# ---------------------------------------------------------------------------
# Decoder unit tests (branch "decoder"): `make unit` builds
# test/unit/decode_test, a frontend TAP program over the pure decoder,
# under AddressSanitizer + UBSan (clang when available, else gcc).  Run by
# test/t/001_decoder_unit.pl; needs no server.  It builds
# test/unit/copy_row_test too (the COPY row splitters, src/copy_row.c), run by
# test/t/004_copy_row_unit.pl.
# ---------------------------------------------------------------------------
UNIT_CC := $(if $(shell command -v clang 2>/dev/null),clang,gcc)
UNIT_SANITIZE = -fsanitize=address,undefined -fno-sanitize-recover=all \
	-fno-omit-frame-pointer
UNIT_CFLAGS = -g -O1 -DFRONTEND $(UNIT_SANITIZE) -Wall -Wextra -Werror \
	-Wno-unused-parameter -Wno-ignored-attributes -Wno-missing-field-initializers
UNIT_CPPFLAGS = -Isrc -Itest/common -I$(shell $(PG_CONFIG) --includedir-server)
UNIT_LDLIBS = -L$(shell $(PG_CONFIG) --pkglibdir) -L$(shell $(PG_CONFIG) --libdir) \
	-lpgcommon -lpgport
UNIT_SRCS = test/unit/decode_test.c test/common/palloc_arena.c src/decode_pgoutput.c src/change.c
W2J_UNIT_SRCS = test/unit/decode_wal2json_test.c test/common/palloc_arena.c \
	src/decode_wal2json.c src/change.c
PGL_UNIT_SRCS = test/unit/decode_pglogical_test.c test/common/palloc_arena.c \
	src/decode_pglogical.c src/change.c

.PHONY: unit
unit: test/unit/decode_test test/unit/copy_row_test test/unit/decode_wal2json_test \
	test/unit/decode_pglogical_test

test/unit/decode_pglogical_test: $(PGL_UNIT_SRCS) src/change.h src/hex.h src/decode_pglogical.h \
		test/common/palloc_arena.h test/common/unit_tap.h
	$(UNIT_CC) $(UNIT_CFLAGS) $(UNIT_CPPFLAGS) -o $@ $(PGL_UNIT_SRCS) $(UNIT_SANITIZE) $(UNIT_LDLIBS)

test/unit/decode_wal2json_test: $(W2J_UNIT_SRCS) src/change.h src/hex.h src/decode_wal2json.h \
		test/common/palloc_arena.h test/common/unit_tap.h
	$(UNIT_CC) $(UNIT_CFLAGS) $(UNIT_CPPFLAGS) -o $@ $(W2J_UNIT_SRCS) $(UNIT_SANITIZE) $(UNIT_LDLIBS)

test/unit/decode_test: $(UNIT_SRCS) src/change.h src/hex.h src/decode_pgoutput.h test/common/palloc_arena.h test/common/unit_tap.h
	$(UNIT_CC) $(UNIT_CFLAGS) $(UNIT_CPPFLAGS) -o $@ $(UNIT_SRCS) $(UNIT_SANITIZE) $(UNIT_LDLIBS)

COPY_ROW_TEST_SRCS = test/unit/copy_row_test.c src/copy_row.c

test/unit/copy_row_test: $(COPY_ROW_TEST_SRCS) src/change.h src/hex.h src/copy_row.h
	$(UNIT_CC) $(UNIT_CFLAGS) $(UNIT_CPPFLAGS) -o $@ $(COPY_ROW_TEST_SRCS) $(UNIT_SANITIZE) \
		$(UNIT_LDLIBS)

EXTRA_CLEAN += test/unit/decode_test test/unit/copy_row_test test/unit/decode_wal2json_test \
	test/unit/decode_pglogical_test

# ---------------------------------------------------------------------------
# Decoder fuzzing: `make fuzz` builds test/fuzz/fuzz_decoder with libFuzzer,
# AddressSanitizer and UBSan (clang-14 + libclang-rt-14-dev); run by
# test/t/003_decoder_fuzz.pl for ASH_FUZZ_SECONDS (30; 300 with ASH_LONG=1).
# ---------------------------------------------------------------------------
FUZZ_CC := $(shell command -v clang-14 2>/dev/null || command -v clang 2>/dev/null)
FUZZ_SRCS = test/fuzz/fuzz_decoder.c test/common/palloc_arena.c src/decode_pgoutput.c \
	src/decode_wal2json.c src/decode_pglogical.c src/change.c

.PHONY: fuzz
fuzz: test/fuzz/fuzz_decoder

test/fuzz/fuzz_decoder: $(FUZZ_SRCS) src/change.h src/hex.h src/decode_pgoutput.h src/decode_wal2json.h \
		src/decode_pglogical.h test/common/palloc_arena.h
	$(FUZZ_CC) -g -O1 -DFRONTEND -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
		-Wall -Werror -Wno-unused-parameter -Wno-ignored-attributes \
		$(UNIT_CPPFLAGS) -o $@ $(FUZZ_SRCS) $(UNIT_LDLIBS)

EXTRA_CLEAN += test/fuzz/fuzz_decoder
