# 001_decoder_unit.pl
#
# Decoder unit tests: build test/unit/decode_test (`make unit`, a frontend
# program under AddressSanitizer + UBSan) and pass its TAP through.  Needs no
# server.  Run from the repository root by `make installcheck` (prove), or
# directly: prove test/t/001_decoder_unit.pl
use strict;
use warnings;

use FindBin;
use File::Spec;
use Test::More;

my $root = File::Spec->rel2abs(File::Spec->catdir($FindBin::Bin, '..', '..'));
chdir $root or BAIL_OUT("cannot chdir to $root: $!");

my $make = $ENV{ASH_MAKE} // 'make';
my $build = `$make -s unit 2>&1`;
if ($? != 0)
{
	fail('build test/unit/decode_test with make unit');
	diag($build);
	done_testing();
	exit 0;
}
pass('build test/unit/decode_test with make unit');

my $bin = File::Spec->catfile($root, 'test', 'unit', 'decode_test');
my $fixtures = File::Spec->catdir($root, 'test', 'fixtures', 'pgoutput');

# Keep the sanitizers fatal and loud; stderr goes straight to prove.
local $ENV{ASAN_OPTIONS} = $ENV{ASAN_OPTIONS} // 'abort_on_error=0:detect_leaks=1';
local $ENV{UBSAN_OPTIONS} = $ENV{UBSAN_OPTIONS} // 'print_stacktrace=1';

open(my $fh, '-|', $bin, $fixtures)
  or BAIL_OUT("cannot run $bin: $!");

my $plan;
my $seen = 0;
my $last_failed = 0;
while (my $line = <$fh>)
{
	chomp $line;
	if ($line =~ /^(not )?ok (\d+)(?: - (.*))?$/)
	{
		my ($failed, $num, $desc) = (defined $1, $2, $3 // '');
		$seen++;
		$last_failed = $failed;
		ok(!$failed, "decode_test $num: $desc");
	}
	elsif ($line =~ /^1\.\.(\d+)$/)
	{
		$plan = $1;
	}
	elsif ($line =~ /^#\s?(.*)$/)
	{
		# comments after a failure explain it; others are informational
		if ($last_failed) { diag($1) }
		else { note($1) }
	}
	elsif ($line ne '')
	{
		diag("unexpected output from decode_test: $line");
	}
}
close($fh);
my $status = $?;

is($status, 0, 'decode_test exited with status 0');
ok(defined $plan && $plan == $seen && $seen > 0,
	'decode_test ran its whole plan (' . ($plan // 'no plan') . " planned, $seen seen)");

done_testing();
