# 001_decoder_unit.pl
#
# Decoder unit tests: build test/unit/decode_test and decode_wal2json_test (`make unit`, a frontend
# program under AddressSanitizer + UBSan) and pass its TAP through.  Needs no
# server.  Run from the repository root by `make installcheck` (prove), or
# directly: prove test/t/001_decoder_unit.pl
use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use File::Spec;
use Test::More;

use AshUnit;

AshUnit::run_tap('decode_test',
	File::Spec->catdir(AshUnit::root(), 'test', 'fixtures', 'pgoutput'));
# wal2json 2.5's captured output (test/fixtures/wal2json)
AshUnit::run_tap('decode_wal2json_test',
	File::Spec->catdir(AshUnit::root(), 'test', 'fixtures', 'wal2json'));
# pglogical_output's captured native protocol (test/fixtures/pglogical)
AshUnit::run_tap('decode_pglogical_test',
	File::Spec->catdir(AshUnit::root(), 'test', 'fixtures', 'pglogical'));

done_testing();
