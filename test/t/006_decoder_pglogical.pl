# 006_decoder_pglogical.pl
#
# The pure pglogical_output decoder (src/decode_pglogical.c) without a
# server: its unit test over captured native-protocol bytes
# (test/unit/decode_pglogical_test, ASan + UBSan), then libFuzzer over it
# for ASH_FUZZ_SECONDS (15; 150 with ASH_LONG=1), seeded with the capture.
use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use File::Path qw(make_path);
use File::Spec;
use Test::More;

use AshUnit;

AshUnit::run_tap('decode_pglogical_test',
	File::Spec->catdir(AshUnit::root(), 'test', 'fixtures', 'pglogical'));

my $secs = $ENV{ASH_FUZZ_SECONDS} // ($ENV{ASH_LONG} ? 150 : 15);
my $out = File::Spec->rel2abs(($ENV{TESTDIR} // '.') . '/tmp_check/fuzz_pglogical');
make_path("$out/corpus");

my $build = `make -s test/fuzz/fuzz_pglogical 2>&1`;
if ($? != 0)
{
	if ($build =~ /fuzzer|clang|command not found/i)
	{
		diag("libFuzzer not available: fuzzing skipped");
		done_testing();
		exit 0;
	}
	BAIL_OUT("pglogical fuzz target does not build: $build");
}

# seeds: every captured message, in each of the four decoder states
my $seeds = 0;
open my $fh, '<', 'test/fixtures/pglogical/basic.hex' or die $!;
while (my $line = <$fh>)
{
	chomp $line;
	next if $line eq '';
	for my $state (0 .. 3)
	{
		open my $o, '>:raw', sprintf('%s/corpus/seed%05d', $out, $seeds++) or die $!;
		print $o chr($state) . pack('H*', $line);
		close $o;
	}
}
close $fh;
cmp_ok($seeds, '>', 100, "seed corpus from the captured stream ($seeds inputs)");

my $log = "$out/fuzz.log";
my $rc = system("test/fuzz/fuzz_pglogical -max_total_time=$secs -rss_limit_mb=2048 "
	  . "-max_len=131072 -print_final_stats=1 $out/corpus > $log 2>&1");
open my $lf, '<', $log or die $!;
my $text = do { local $/; <$lf> };
close $lf;
my ($runs) = $text =~ /stat::number_of_executed_units:\s*(\d+)/;
diag("fuzzed for ${secs}s: " . ($runs // 0) . " inputs executed");
is($rc, 0, 'pglogical fuzzer exited cleanly (no crash, no sanitizer report)')
  or diag(substr($text, -4000));
unlike($text, qr/ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:/,
	'no sanitizer finding');
cmp_ok($runs // 0, '>', 1000, 'fuzzer executed a meaningful number of inputs');

done_testing();
