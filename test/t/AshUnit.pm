# AshUnit — run a frontend unit-test program of test/unit/ and pass its TAP
# through.
#
#   use FindBin;
#   use lib $FindBin::Bin;
#   use AshUnit;
#   AshUnit::run_tap('decode_test', @args);
#   done_testing();
#
# run_tap builds every unit program with `make -s unit` ($ASH_MAKE overrides
# make) from the repository root (it chdirs there), runs
# test/unit/<program> with @args under fatal, loud sanitizers, and turns each
# line of its TAP into a test of this file: "<program> N: description".  Then
# it checks that the program exited with status 0 and ran its whole plan.  A
# failed build is one failed test (with the build output as diagnostics);
# the program is not run then; a build that works is not counted as a test.
# Needs no server.
package AshUnit;

use strict;
use warnings;

use File::Spec;
use FindBin;
use Test::More;

# The repository root (this module lives in test/t).
sub root
{
	my (undef, $dir) = File::Spec->splitpath(File::Spec->rel2abs(__FILE__));
	return File::Spec->rel2abs(File::Spec->catdir($dir, '..', '..'));
}

sub run_tap
{
	my ($program, @args) = @_;
	my $root = root();
	local $Test::Builder::Level = $Test::Builder::Level + 1;

	chdir $root or BAIL_OUT("cannot chdir to $root: $!");

	my $make = $ENV{ASH_MAKE} // 'make';
	my $build = `$make -s unit 2>&1`;
	if ($? != 0)
	{
		fail("build test/unit/$program with make unit");
		diag($build);
		return;
	}
	# a build that works is a precondition, not a test

	my $bin = File::Spec->catfile($root, 'test', 'unit', $program);

	# Keep the sanitizers fatal and loud; stderr goes straight to prove.
	local $ENV{ASAN_OPTIONS} = $ENV{ASAN_OPTIONS} // 'abort_on_error=0:detect_leaks=1';
	local $ENV{UBSAN_OPTIONS} = $ENV{UBSAN_OPTIONS} // 'print_stacktrace=1';

	open(my $fh, '-|', $bin, @args)
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
			ok(!$failed, "$program $num: $desc");
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
			diag("unexpected output from $program: $line");
		}
	}
	close($fh);
	my $status = $?;

	is($status, 0, "$program exited with status 0");
	ok(defined $plan && $plan == $seen && $seen > 0,
		"$program ran its whole plan (" . ($plan // 'no plan') . " planned, $seen seen)");
	return;
}

1;
