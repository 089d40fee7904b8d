# 006_headers_standalone.pl
#
# Every header of src/ compiles on its own after postgres.h: a module that
# includes one needs nothing else first (the include order of a .c file
# must not decide whether it builds).  And the check can fail: a header
# using a type it does not include is refused.  Needs no server.
use strict;
use warnings;

use File::Spec;
use File::Temp qw(tempdir);
use FindBin;
use lib $FindBin::Bin;
use Test::More;

use AshUnit;

my $root = AshUnit::root();
my $tmp = tempdir(CLEANUP => 1);
chomp(my $cc = `pg_config --cc`);
chomp(my $server = `pg_config --includedir-server`);
chomp(my $client = `pg_config --includedir`);
plan skip_all => 'pg_config gives no compiler' unless $cc && -d $server;

# compile "postgres.h, then the header" with src/ first on the include path
sub compiles
{
	my ($dir, $header) = @_;
	my $c = File::Spec->catfile($tmp, 'h.c');
	open my $fh, '>', $c or die "$c: $!";
	print $fh "#include \"postgres.h\"\n#include \"$header\"\n";
	close $fh;
	return system("$cc -fsyntax-only -I'$dir' -I'$root/src' -I'$server' -I'$client' '$c' >/dev/null 2>&1") == 0;
}

my @headers = map { (File::Spec->splitpath($_))[2] } glob("$root/src/*.h");
cmp_ok(scalar @headers, '>', 10, 'the headers of src/ are found');
ok(compiles("$root/src", $_), "$_ compiles after postgres.h alone") for @headers;

# the check can fail: a header that uses List without nodes/pg_list.h
open my $bad, '>', File::Spec->catfile($tmp, 'bad_header.h') or die;
print $bad "typedef struct X { List *l; } X;\n";
close $bad;
ok(!compiles($tmp, 'bad_header.h'), 'a header missing an include is refused');

done_testing();
