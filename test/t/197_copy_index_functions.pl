# A snapshot's copy into a target whose expression index, or partial index
# predicate, calls an IMMUTABLE PL/pgSQL function: the copy's index build
# runs the function with a snapshot (it halted apply_failed, XX000, "cannot
# execute SQL without an outer snapshot or portal") and as the table's
# owner -- the sink owner -- never as the worker's superuser.  v1 copy,
# incremental copy, and rows streamed afterwards.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my ($src, $dst) = AshTest::start_pair(dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', 'snapshot_provenance 1 ' . AshTenancy::key_hex(19));
sub q_dst { return $dst->safe_psql($DB, $_[0]); }

# the function notes who runs it (through a volatile helper: an IMMUTABLE
# function may not write)
q_dst(q{CREATE ROLE app LOGIN; CREATE SCHEMA appz AUTHORIZATION app;
GRANT CREATE ON SCHEMA public TO app;
CREATE TABLE public.seen (tag text, who text); GRANT INSERT ON public.seen TO PUBLIC;
SET ROLE app;
CREATE FUNCTION appz.note(tag text) RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN INSERT INTO public.seen VALUES (tag, current_user); END $$;
CREATE FUNCTION appz.norm(v text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN PERFORM appz.note('v1'); RETURN lower(v); END $$;
CREATE FUNCTION appz.normi(v text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN PERFORM appz.note('incremental'); RETURN lower(v); END $$;});

# tv, tp: v1 copy; ti: incremental copy (chunks of 10, provenance columns
# at the destination, compared through a view)
my %idx = (
	tv => 'CREATE INDEX tv_norm ON tv (appz.norm(email))',
	tp => "CREATE INDEX tp_part ON tp (id) WHERE appz.norm(email) LIKE 'a%'",
	ti => 'CREATE INDEX ti_norm ON ti (appz.normi(email))',
);
for my $t (qw(tv tp ti ash_marker_si))
{
	my $cols = $t eq 'ash_marker_si' ? 'id bigint PRIMARY KEY, note text' : 'id integer PRIMARY KEY, email text';
	AshTest::both($src, $dst, "CREATE TABLE $t ($cols)");
	next if $t eq 'ash_marker_si';
	q_dst("ALTER TABLE $t OWNER TO app; SET ROLE app; $idx{$t}");
	$src->safe_psql($DB, "INSERT INTO $t SELECT g, CASE WHEN g % 2 = 0 THEN 'A' ELSE 'B' END || g || '\@x' FROM generate_series(1, 30) g");
}
for my $t (qw(ti ash_marker_si))
{
	q_dst("ALTER TABLE $t ADD replica_fingerprint bytea, ADD replica_seen_attempt bytea");
}
AshTest::both($src, $dst, 'CREATE VIEW ti_v AS SELECT id, email FROM ti');
$src->safe_psql($DB, 'CREATE PUBLICATION pub_v FOR TABLE tv, tp; CREATE PUBLICATION pub_i FOR TABLE ti, ash_marker_si');
AshTest::setup_pipeline($src, $dst, sink => 'sv', publication => 'pub_v', maps => [ ['tv'], ['tp'] ], start => 0,
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::setup_pipeline($src, $dst, sink => 'si', publication => 'pub_i', marker => 0, start => 0,
	maps => [ [ 'ti', snapshot_provenance => 'true' ], [ 'ash_marker_si', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 10");
q_dst('DELETE FROM seen');
for my $s (qw(sv si))
{
	q_dst("ALTER TABLE ash_marker_$s OWNER TO app; SELECT ash_replicant_alter_sink('$s', owner => 'app')");
	AshTest::start_sink($dst, $s);
}
for my $s (qw(sv si))
{
	ok(AshTest::wait_caught_up($src, $dst, $s, name => "$s: copied"), "$s: copied")
	  or diag q_dst("SELECT concat_ws(' ', state, reason, halt_sqlstate, halt_condition, halt_target) FROM ash_replicant_status('$s')");
}
AshTest::assert_mirror_equal($src, $dst, [qw(tv tp)], name => 'copy mirrors the source');
AshTest::assert_mirror_equal($src, $dst, ['ti_v'], order_by => 'id', name => 'copy mirrors the source');
is(q_dst("SELECT string_agg(DISTINCT tag, ',') FROM seen"), 'incremental,v1', 'both copies ran their index functions');

# streamed rows go through the same indexes
$src->safe_psql($DB, "INSERT INTO $_ SELECT g, 'a' || g FROM generate_series(31, 35) g; UPDATE $_ SET email = 'C' || id WHERE id = 2")
  for qw(tv tp ti);
ok(AshTest::wait_caught_up($src, $dst, $_), "$_: streamed") for qw(sv si);
AshTest::assert_mirror_equal($src, $dst, [qw(tv tp)], name => 'streamed rows mirror the source');
AshTest::assert_mirror_equal($src, $dst, ['ti_v'], order_by => 'id', name => 'streamed rows mirror the source');

is(q_dst("SELECT string_agg(DISTINCT who, ',') FROM seen"), 'app',
	'the index function ran as the sink owner only');

# every row in each index (an entry left out would show); the scans read
# the index's own entries, evaluating nothing per row
for my $t (qw(tv ti))
{
	my $f = $t eq 'ti' ? 'appz.normi' : 'appz.norm';
	is(q_dst("SET enable_seqscan = off; SET enable_bitmapscan = off; SELECT count(*) FROM $t WHERE $f(email) >= ''"),
		'35', "$t: the expression index holds every row");
}
is(q_dst("SET enable_seqscan = off; SET enable_bitmapscan = off; SELECT count(*) FROM tp WHERE appz.norm(email) LIKE 'a%' AND id > 0"),
	$src->safe_psql($DB, "SELECT count(*) FROM tp WHERE lower(email) LIKE 'a%'"), 'tp: the partial index holds every row it covers');
like(q_dst("SET enable_seqscan = off; SET enable_bitmapscan = off; EXPLAIN (COSTS OFF) SELECT count(*) FROM tp WHERE appz.norm(email) LIKE 'a%' AND id > 0"),
	qr/Index (Only )?Scan using tp_part/, 'tp: read through its partial index');
done_testing();
