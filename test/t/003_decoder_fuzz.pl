# Fuzz the pure decoders (pgoutput, wal2json) with libFuzzer (ASan + UBSan) for a bounded
# time, seeded with the captured real pgoutput streams.  No server needed.
use strict;
use warnings;
use File::Path qw(make_path);
use Test::More;

my $secs = $ENV{ASH_FUZZ_SECONDS} // ($ENV{ASH_LONG} ? 300 : 30);
my $out = ($ENV{TESTDIR} // '.') . '/tmp_check/fuzz';
make_path("$out/corpus");

my $build = `make -s fuzz 2>&1`;
if ($? != 0)
{
	# a machine without clang's fuzzer runtime cannot run this test
	plan skip_all => "libFuzzer not available: $build" if $build =~ /fuzzer|clang|command not found/i;
	BAIL_OUT("fuzz target does not build: $build");
}
# a built target is a precondition, not a test
BAIL_OUT('fuzz target missing after a successful build') unless -x 'test/fuzz/fuzz_decoder';

# seed corpus: every captured message, prefixed with its protocol selector
my $seeds = 0;
for my $fixture (glob 'test/fixtures/pgoutput/*.hex')
{
	my $selector = $fixture =~ /proto2/ ? 1 : 0;
	open my $fh, '<', $fixture or die "$fixture: $!";
	while (my $line = <$fh>)
	{
		chomp $line;
		next if $line eq '' || $line =~ /^#/;
		for my $stream (0, 4)
		{
			open my $o, '>:raw', sprintf('%s/corpus/seed%05d', $out, $seeds++) or die $!;
			print $o chr($selector | $stream) . pack('H*', $line);
			close $o;
		}
	}
	close $fh;
}
# wal2json: each transaction of the captured stream (its lines from B to
# C, or a lone message), selector 0x80
my $w2j_seeds = 0;
{
	open my $fh, '<', 'test/fixtures/wal2json/basic.jsonl' or die "basic.jsonl: $!";
	my @group;
	while (my $line = <$fh>)
	{
		push @group, $line;
		# a group ends with its COMMIT, or is a non-transactional message
		next unless $line =~ /"action":"C"/ || $line =~ /"transactional":false/;
		open my $o, '>:raw', sprintf('%s/corpus/seed%05d', $out, $seeds++) or die $!;
		print $o chr(0x80) . join('', @group);
		close $o;
		$w2j_seeds++;
		@group = ();
	}
	close $fh;
}
# pglogical_output: every captured message, in each of the four decoder
# states, selector 0x40 | state
my $pgl_seeds = 0;
{
	open my $fh, '<', 'test/fixtures/pglogical/basic.hex' or die "basic.hex: $!";
	while (my $line = <$fh>)
	{
		chomp $line;
		next if $line eq '';
		for my $state (0 .. 3)
		{
			open my $o, '>:raw', sprintf('%s/corpus/seed%05d', $out, $seeds++) or die $!;
			print $o chr(0x40 | $state) . pack('H*', $line);
			close $o;
			$pgl_seeds++;
		}
	}
	close $fh;
}
cmp_ok($seeds, '>', 100, "seed corpus from captured streams ($seeds inputs)");
cmp_ok($w2j_seeds, '>=', 15, "wal2json seeds: every captured transaction ($w2j_seeds inputs)");
cmp_ok($pgl_seeds, '>=', 100, "pglogical seeds: every captured message ($pgl_seeds inputs)");

my $log = "$out/fuzz.log";
my $rc = system("test/fuzz/fuzz_decoder -max_total_time=$secs -rss_limit_mb=2048 "
	  . "-max_len=65536 -print_final_stats=1 $out/corpus > $log 2>&1");
open my $lf, '<', $log or die $!;
my $text = do { local $/; <$lf> };
close $lf;
my ($runs) = $text =~ /stat::number_of_executed_units:\s*(\d+)/;
diag("fuzzed for ${secs}s: " . ($runs // 0) . " inputs executed");
is($rc, 0, 'fuzzer exited cleanly (no crash, no sanitizer report)')
  or diag(substr($text, -4000));
unlike($text, qr/ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:/,
	'no sanitizer finding');
cmp_ok($runs // 0, '>', 1000, 'fuzzer executed a meaningful number of inputs');

# every executed input is a mutated (bad) protocol stream fed to the decoder
diag "ash-proof: fuzz_inputs=" . ($runs // 0) . " checks=" . Test::More->builder->current_test;
done_testing();
