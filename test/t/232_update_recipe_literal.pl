# docs/operations.md "Updating the extension", its SQL run as written there
# (read from the document), on a destination with a running pipeline (s1),
# a pipeline the operator stopped on purpose (s2) and a sink without a
# pipeline (s3).  The recipe restarted every sink: the statement aborted on
# s3 (no pipeline to start) and, without s3, started s2 too.  It now records
# which pipelines ran before the stop and starts exactly those.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;

# the recipe: the first sql block of the section, split where the server
# is restarted (the comment of step 2)
open(my $fh, '<', 'docs/operations.md') or die "docs/operations.md: $!";
my $doc = do { local $/; <$fh> };
close $fh;
my ($section) = $doc =~ /^## Updating the extension\n(.*?)^## /ms;
my ($block) = ($section // '') =~ /^```sql\n(.*?)^```/ms;
ok(defined $block, 'the section has its SQL block') or BAIL_OUT('no recipe');
my ($before_restart, $after_restart) = split /^(?=--.*restart the server)/m, $block, 2;
ok(defined $after_restart, 'the block says where the server restarts') or BAIL_OUT('no restart step');
note "before the restart:\n$before_restart\nafter:\n$after_restart";

my ($src, $dst) = AshTest::start_pair(log_statement => 'none', no_extension => 1);
$dst->safe_psql($DB, "CREATE EXTENSION ash_replicant VERSION '1.9.0'");
for my $s (qw(s1 s2 s3))
{
	AshTest::both($src, $dst, "CREATE TABLE t_$s (id int PRIMARY KEY, v text)");
	$src->safe_psql($DB, "CREATE PUBLICATION pub_$s FOR TABLE t_$s");
}
# on 1.9.0 catalogs this library runs no pipeline: s1 is started (enabled),
# s2 stopped on purpose, s3 a sink whose pipeline is not configured yet
AshTest::setup_pipeline($src, $dst, sink => 's1', publication => 'pub_s1', maps => [ ['t_s1'] ], start => 0);
AshTest::setup_pipeline($src, $dst, sink => 's2', publication => 'pub_s2', maps => [ ['t_s2'] ], start => 0);
$dst->safe_psql($DB, "SELECT ash_replicant_create_sink('s3'); SELECT ash_replicant_map_table('s3', 't_s3'::regclass)");
AshTest::start_sink($dst, 's1');

my ($rc, $out, $err) = $dst->psql($DB, $before_restart);
is($rc, 0, 'steps 1: record and stop') or diag $err;
is($dst->safe_psql($DB, "SELECT count(*) FROM ash_replicant.pipelines WHERE enabled"), '0',
	'every pipeline is stopped');
$dst->restart;
($rc, $out, $err) = $dst->psql($DB, $after_restart);
is($rc, 0, 'steps 2-4: update, version, start') or diag $err;
my $default = $dst->safe_psql($DB, "SELECT default_version FROM pg_available_extensions WHERE name = 'ash_replicant'");
is($dst->safe_psql($DB, "SELECT extversion FROM pg_extension WHERE extname = 'ash_replicant'"), $default,
	'the extension is updated');
like($out, qr/^\Q$default\E$/m, 'step 3 shows the version');

AshTest::wait_status($dst, 's1', 'healthy', undef, src => $src, name => 's1 (running before) runs again');
$src->safe_psql($DB, "INSERT INTO t_s1 SELECT g, 'after' FROM generate_series(1, 20) g");
ok(AshTest::wait_caught_up($src, $dst, 's1'), 's1 streams');
AshTest::assert_mirror_equal($src, $dst, ['t_s1'], name => 's1 mirror');
is(AshTest::status_row($dst, 's2')->{state}, 'not_started', 's2 (stopped on purpose) stays stopped');
is($dst->safe_psql($DB, "SELECT count(*) FROM ash_replicant.pipelines WHERE sink_name = 's3'"), '0',
	's3 still has no pipeline');
is($dst->safe_psql($DB, "SELECT count(*) FROM pg_class WHERE relname = 'ash_replicant_was_running'"), '0',
	'the record of the running pipelines is dropped');
done_testing();
