# The documented rollback (docs/operations.md, "Updating the extension":
# ALTER EXTENSION ... UPDATE TO an older version with pipelines_stopped, then
# the older build) of a pipeline whose contract manifest records each target
# column's number (attnum, builds since 2026-12-06).  Builds of 1.7.0 and
# before rebuild manifests without it, and one that holds it is not
# contained in theirs: every pipeline halted contract_incompatible after the
# rollback.  The rollback to 1.7.0 now strips the numbers (the fingerprint
# follows); the rollback to 1.8.0 keeps them (1.8.0 builds since 2026-12-06
# record them).  Updated again, the pipeline runs on and the numbers are
# recorded again (a manifest without them is contained in one with them).
#
# The publication membership records likewise lose, in the rollback to
# 1.7.0, the kinds of token 1.8.0 builds write, and in the rollback to
# 1.6.0 those of 1.7.0 builds (builds before take a "def:" token they do not
# find for a redefinition: publication_gap at every start).
#
# With ASH_OLD_LIBRARY (the ash_replicant.so of an older build, at most
# 1.6.0, e.g. a 1.5.0 build) and ASH_OLD_VERSION (its version, default
# 1.5.0) the catalogs are rolled back to that version and the older build
# must run the pipeline on from its checkpoint, streaming.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use File::Copy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my $old_so = $ENV{ASH_OLD_LIBRARY};
my $oldv = $ENV{ASH_OLD_VERSION} // '1.5.0';

my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $current = $dst->safe_psql($DB, "SELECT extversion FROM pg_extension WHERE extname = 'ash_replicant'");
AshTest::both($src, $dst, "CREATE TABLE acct (id int PRIMARY KEY, v text, w bigint)");
$src->safe_psql($DB, "CREATE PUBLICATION pub FOR TABLE acct");
AshTest::setup_pipeline($src, $dst, sink => 's1', publication => 'pub', maps => [ ['acct'] ]);
AshTest::wait_slot_consistent($src, $dst, 's1');
my $n = 0;
sub work
{
	my @s;
	for (1 .. 10) { $n++; push @s, "INSERT INTO acct VALUES ($n, 'v$n', $n * 7);" }
	$src->safe_psql($DB, join(' ', @s));
}
sub attnums
{
	return $dst->safe_psql($DB, "SELECT count(*) FROM ash_replicant.checkpoints c,"
		  . " jsonb_path_query(c.contract, '\$.relations.*.columns.*.attnum')");
}
my $contract = AshTest::checkpoint_sql('s1', 'c.contract::text');
my $fingerprint_ok = AshTest::checkpoint_sql('s1',
	"c.contract_fingerprint = sha256(convert_to(c.contract::text, 'UTF8'))");

work();
ok(AshTest::wait_caught_up($src, $dst, 's1'), "$current: streams");
AshTest::wait_status($dst, 's1', 'healthy', undef, src => $src, name => "$current: healthy");
AshTest::stop_settled($src, $dst, 's1');
cmp_ok(attnums(), '>=', 3, "$current: the manifest records each column's number");
my $before = $dst->safe_psql($DB, $contract);
# the membership records' tokens of these kinds
sub tokens
{
	my ($kinds) = @_;
	return $dst->safe_psql($DB, "SELECT count(*) FROM ash_replicant.publication_members m,"
		  . " unnest(string_to_array(m.published, ',')) t WHERE t ~ '^($kinds)'");
}
cmp_ok(tokens('def:row:|typ:'), '>', 0, "$current: the membership records hold tokens of 1.8.0 builds");
my $members = tokens('rel:|def:[0-9]');
cmp_ok($members, '>', 0, "$current: ... and of the publication");

# the rollback, step by step
my ($rc, $out, $err) = $dst->psql($DB, "SET ash_replicant.pipelines_stopped = on;"
	  . " ALTER EXTENSION ash_replicant UPDATE TO '1.8.0'");
is($rc, 0, 'rollback to 1.8.0 accepted') or diag $err;
is($dst->safe_psql($DB, $contract), $before, 'the rollback to 1.8.0 keeps the manifest');
($rc, $out, $err) = $dst->psql($DB, "SET ash_replicant.pipelines_stopped = on;"
	  . " ALTER EXTENSION ash_replicant UPDATE TO '1.7.0'");
is($rc, 0, 'rollback to 1.7.0 accepted') or diag $err;
is(attnums(), '0', 'the rollback to 1.7.0 strips the column numbers');
# jsonb sorts keys by length: "attnum" is never a column's last key
(my $stripped = $before) =~ s/"attnum": \d+, //g;
is($dst->safe_psql($DB, $contract), $stripped, '... and nothing else of the manifest');
is($dst->safe_psql($DB, $fingerprint_ok), 't', '... and the fingerprint is that of the manifest');
is(tokens('def:row:|typ:|def:inh:|def:trg:'), '0', '... the membership records lose the tokens of 1.8.0 builds');
is(tokens('rel:|def:[0-9]'), $members, '... and keep the others');
cmp_ok(tokens('def:tbl:|col:'), '>', 0, '... those of 1.7.0 builds too');
($rc, $out, $err) = $dst->psql($DB, "SET ash_replicant.pipelines_stopped = on;"
	  . " ALTER EXTENSION ash_replicant UPDATE TO '1.6.0'");
is($rc, 0, 'rollback to 1.6.0 accepted') or diag $err;
is(tokens('def:tbl:|col:'), '0', 'the rollback to 1.6.0 strips the tokens of 1.7.0 builds');
is(tokens('rel:|def:[0-9]'), $members, '... and keeps the others');

my $pkglib = `pg_config --pkglibdir`;
chomp $pkglib;
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $new_so = "$tmp/new.so";
sub install_lib
{
	my ($from) = @_;
	copy($from, "$pkglib/ash_replicant.so.tmp") or die "copy: $!";
	rename("$pkglib/ash_replicant.so.tmp", "$pkglib/ash_replicant.so") or die "rename: $!";
}
if ($old_so)
{
	copy("$pkglib/ash_replicant.so", $new_so) or die "copy: $!";
	($rc, $out, $err) = $dst->psql($DB, "SET ash_replicant.pipelines_stopped = on;"
		  . " ALTER EXTENSION ash_replicant UPDATE TO '$oldv'");
	is($rc, 0, "rollback to $oldv accepted") or diag $err;
	install_lib($old_so);
	$dst->restart;
	AshTest::start_sink($dst, 's1');
	work();
	my ($st, $rs) = AshTest::wait_status($dst, 's1', 'healthy', undef, src => $src,
		name => "the $oldv build runs the pipeline on");
	note "after rollback: $st/" . ($rs // '') . '; ' . AshTest::halt_line($dst, 's1', $rs // '');
	ok(AshTest::wait_caught_up($src, $dst, 's1'), "the $oldv build streams");
	AshTest::stop_settled($src, $dst, 's1');
	install_lib($new_so);
	$dst->restart;
}
END { install_lib($new_so) if $old_so && -f $new_so; }

# updated again, the current build runs on and records the numbers again
is($dst->psql($DB, 'ALTER EXTENSION ash_replicant UPDATE'), 0, "update to $current");
AshTest::start_sink($dst, 's1');
work();
ok(AshTest::wait_caught_up($src, $dst, 's1'), "$current again: streams");
AshTest::wait_status($dst, 's1', 'healthy', undef, src => $src, name => "$current again: healthy");
AshTest::assert_mirror_equal($src, $dst, ['acct'], name => 'mirror after the round trip');
ok(AshTest::wait_until(sub { attnums() >= 3 }, timeout => 30), 'the column numbers are recorded again');
done_testing();
