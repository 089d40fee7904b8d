# 005_reasons_documented.pl
#
# Every reason code of src/errors.c has its runbook section ("### <code>")
# in docs/reasons.md: tools/check_reasons_doc.sh passes on the tree.  And
# the check can fail: on a copy of docs/reasons.md with one code's section
# heading removed it exits 1 and names exactly that code.  Needs no server.
# Run from the repository root by `make installcheck` (prove), or directly:
# prove test/t/005_reasons_documented.pl
use strict;
use warnings;

use File::Spec;
use File::Temp qw(tempdir);
use FindBin;
use lib $FindBin::Bin;
use Test::More;

use AshUnit;

my $root = AshUnit::root();
my $script = File::Spec->catfile($root, 'tools', 'check_reasons_doc.sh');
my $doc = File::Spec->catfile($root, 'docs', 'reasons.md');
my $errors_c = File::Spec->catfile($root, 'src', 'errors.c');
my $tmp = tempdir(CLEANUP => 1);

# A word quoted for the shell.
sub sh_quote
{
	my ($s) = @_;
	$s =~ s/'/'\\''/g;
	return "'$s'";
}

# Run the script with its arguments; returns (exit status, stdout + stderr).
sub check
{
	my (@args) = @_;
	my $out = File::Spec->catfile($tmp, 'out');
	system(join(' ', 'bash', map { sh_quote($_) } $script, @args)
		  . ' >' . sh_quote($out) . ' 2>&1');
	my $status = $? == -1 ? -1 : $? >> 8;
	open(my $fh, '<', $out) or die "cannot read $out: $!";
	local $/;
	my $text = <$fh>;
	close($fh);
	return ($status, $text);
}

# the codes of the reason table, read independently of the script
open(my $efh, '<', $errors_c) or die "cannot read $errors_c: $!";
my @codes;
while (my $line = <$efh>)
{
	push @codes, $1 while $line =~ /\{"([a-z0-9_]+)",\s*ASH_REASON_[A-Z_]+\}/g;
}
close($efh);
cmp_ok(scalar(@codes), '>=', 90, 'src/errors.c lists the reason codes');

# the tree as it is: every code documented
my ($status, $text) = check();
is($status, 0, 'check_reasons_doc.sh passes on docs/reasons.md')
  or diag($text);
like($text, qr/all ${\ scalar(@codes)} reason codes documented/,
	'it counted every code of the reason table');

# a copy of the document with one section heading removed: the check fails
open(my $dfh, '<', $doc) or die "cannot read $doc: $!";
my @lines = <$dfh>;
close($dfh);
my $victim = 'apply_failed';
ok((grep { $_ eq $victim } @codes), "$victim is a code of the reason table");
my @kept = grep { $_ ne "### $victim\n" } @lines;
is(scalar(@lines) - scalar(@kept), 1, "the copy lacks exactly the section heading of $victim");

my $copy = File::Spec->catfile($tmp, 'reasons.md');
open(my $cfh, '>', $copy) or die "cannot write $copy: $!";
print $cfh @kept;
close($cfh);

($status, $text) = check($copy, $errors_c);
is($status, 1, 'check_reasons_doc.sh fails on a copy missing one section');
like($text, qr/^\s+\Q$victim\E$/m, "it names the undocumented code $victim");
my @named = ($text =~ /^\s+([a-z0-9_]+)$/mg);
is_deeply(\@named, [$victim], 'and no other code');

# a document that cannot be read fails too (never a vacuous pass)
($status, $text) = check(File::Spec->catfile($tmp, 'absent.md'), $errors_c);
is($status, 1, 'check_reasons_doc.sh fails when the document is missing');

done_testing();
