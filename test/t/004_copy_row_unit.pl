# 004_copy_row_unit.pl
#
# COPY row splitter unit tests: build test/unit/copy_row_test (`make unit`, a
# frontend program under AddressSanitizer + UBSan) and pass its TAP through:
# text and binary COPY rows split by src/copy_row.c, hand-written cases, every
# truncation and a fixed-seed random mutation loop against reference
# splitters.  Needs no server.  Run from the repository root by
# `make installcheck` (prove), or directly: prove test/t/004_copy_row_unit.pl
use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use Test::More;

use AshUnit;

AshUnit::run_tap('copy_row_test');

done_testing();
