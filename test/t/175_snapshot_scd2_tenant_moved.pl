# A snapshot of SCD2 history whose rows moved to another tenant while
# nothing streamed (docs/reasons.md#tenant_conflict), attribute tenancy, the
# business key the source's key: the source is authoritative at its
# snapshot, where a key names one row.
#
#  stale_v1, stale_inc  with provenance (v1; incremental in chunks of 4):
#          an open version of another tenant that the attempt has not seen
#          is stale: closed at the copied row's position and the row's
#          version opened under its tenant (before: halted tenant_conflict,
#          "close the other tenant's open version by hand"); open versions
#          equal the source, per key no overlap, a stale version of the same
#          tenant and one the source lacks closed, an old closed version
#          untouched; the closes are host writes (a trigger sees them);
#          healthy
#  moved   incremental: the source moves a key of a stale version (of the
#          key's tenant) to the other tenant before the chunk holding it is
#          read -- the stream leaves the change to the chunk, which then
#          meets the stale version as another tenant's (test 110 halted so
#          under load): closed, the key open under its new tenant, healthy
#  twice   the source holds one key under two tenants (its key includes the
#          tenant, the business key does not): the second copied row meets
#          the version the attempt wrote (seen): still tenant_conflict,
#          nothing of the table committed
#  plain   without provenance a stale version cannot be told from another
#          source row: tenant_conflict, nothing committed
# No planted value (rows, tenants) in any server log, status or error.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my $S  = AshTenancy::sentinel();
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nash_replicant.snapshot_workers = 1\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(29));
my @messages;

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

sub complete
{
	my ($sink) = @_;
	return AshTest::poll($dst, AshTest::checkpoint_sql($sink, "c.snapshot_phase = 'complete'"), 't');
}

# the source table $t (tenants "$S-a" and "$S-b"), its publication, and the
# history target ${t}_hist (provenance columns when $prov), tenant column
# and a view of its open versions; key_with_tenant: the source's key
# includes the tenant
sub tables
{
	my ($t, $prov, %o) = @_;
	my $pk = $o{key_with_tenant} ? 'PRIMARY KEY (id, tenant)' : 'PRIMARY KEY (id)';
	q_src(qq{
CREATE TABLE $t (id bigint, v text, n bigint NOT NULL DEFAULT 0, tenant text NOT NULL, $pk);
ALTER TABLE $t REPLICA IDENTITY FULL;
CREATE VIEW ${t}_v AS SELECT id, v, n, tenant FROM $t;
INSERT INTO $t SELECT g, '$S-' || g, 0, CASE WHEN g % 2 = 1 THEN '$S-a' ELSE '$S-b' END
  FROM generate_series(1, 12) g;
CREATE PUBLICATION pub_$t FOR TABLE $t;
});
	if ($prov)
	{
		AshTest::provenance_history($dst, $t);
	}
	else
	{
		q_dst(qq{
CREATE TABLE ${t}_hist (
	vid bigserial PRIMARY KEY, id bigint NOT NULL, v text, n bigint,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint, UNIQUE (id, valid_from_lsn));
CREATE UNIQUE INDEX ${t}_hist_open ON ${t}_hist (id) WHERE valid_to_lsn IS NULL;
});
	}
	q_dst(qq{
ALTER TABLE ${t}_hist ADD COLUMN tenant text NOT NULL DEFAULT '$S-a';
CREATE OR REPLACE VIEW ${t}_v AS SELECT id, v, n, tenant FROM ${t}_hist WHERE valid_to_lsn IS NULL;
});
	return;
}

sub pipeline
{
	my ($t, $prov, $mode) = @_;
	AshTest::setup_pipeline($src, $dst, sink => $t, publication => "pub_$t", marker => 0,
		maps => [ [ "${t}_hist", source_table => $t, history_strategy => 'scd2',
			history_business_key => ['id'], tenant_column => 'tenant', tenant_strategy => 'attribute',
			($prov ? (snapshot_provenance => 'true') : ()) ] ],
		pipeline_extra => "go_forward_only => false, $mode");
	return;
}

# per key, versions in order without overlap, each closed one after it starts
sub history_ordered
{
	my ($t) = @_;
	return q_dst(qq{
		SELECT coalesce(string_agg(id::text, ','), '') FROM (
		  SELECT id, valid_from_lsn, valid_to_lsn, lag(valid_to_lsn) OVER w AS pto, lag(vid) OVER w AS pvid
		    FROM ${t}_hist WINDOW w AS (PARTITION BY id ORDER BY valid_from_lsn)) x
		 WHERE (pvid IS NOT NULL AND pto IS NULL) OR pto > valid_from_lsn OR valid_to_lsn <= valid_from_lsn});
}

# ---------------------------------------------------------------------------
# stale: versions of another tenant, of the same tenant, one the source
# lacks, an old closed one
# ---------------------------------------------------------------------------
for my $case ([ 'stale_v1', "snapshot => 'v1'" ], [ 'stale_inc', "snapshot => 'incremental', chunk_rows => 4" ])
{
	my ($t, $mode) = @$case;
	tables($t, 1);
	q_dst(qq{
-- keys 1, 3 are tenant a's at the source, 2 is b's: stale versions of the other tenant
INSERT INTO ${t}_hist (id, v, n, valid_from_lsn, tenant) VALUES
  (1, 'stale', -1, 16, '$S-b'), (3, 'stale', -1, 16, '$S-b'), (2, 'stale', -1, 16, '$S-a'),
  (5, 'stale', -1, 16, '$S-a'),                          -- the same tenant's
  (90, 'dest only', -1, 16, '$S-b'),                     -- the source lacks it
  (7, 'old', -2, 8, '$S-b');
UPDATE ${t}_hist SET valid_to_lsn = 16 WHERE id = 7;
CREATE TABLE ${t}_writes (op text, id bigint, tenant text);
CREATE FUNCTION ${t}_seen() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	INSERT INTO public.${t}_writes VALUES (TG_OP, NEW.id, NEW.tenant);
	RETURN NULL;
END \$\$;
CREATE TRIGGER ${t}_seen AFTER UPDATE ON ${t}_hist FOR EACH ROW
  WHEN (OLD.valid_to_lsn IS NULL AND NEW.valid_to_lsn IS NOT NULL) EXECUTE FUNCTION ${t}_seen();
});
	pipeline($t, 1, $mode);
	ok(complete($t), "$t: the attempt completes") or AshTest::diag_pipeline($src, $dst, $t);
	AshTest::wait_status($dst, $t, 'healthy');
	AshTest::assert_mirror_equal($src, $dst, ["${t}_v"], order_by => 'id',
		name => "$t: open versions equal the source");
	is(q_dst(qq{SELECT string_agg(h.id || ':' || (h.tenant = '$S-a')::text, ',' ORDER BY h.id)
		FROM ${t}_hist h JOIN ${t}_hist o ON o.id = h.id AND o.valid_to_lsn IS NULL
		WHERE h.v = 'stale' AND h.id IN (1, 2, 3) AND h.valid_to_lsn = o.valid_from_lsn
		  AND o.tenant IS DISTINCT FROM h.tenant}),
		'1:false,2:true,3:false',
		"$t: each stale version of the other tenant closed where its key's version opens, its tenant kept");
	is(history_ordered($t), '', "$t: per key, versions in order without overlap");
	is(q_dst("SELECT count(*) FROM ${t}_hist WHERE valid_to_lsn IS NOT NULL AND id IN (5, 90) AND n = -1"), '2',
		"$t: the same tenant's stale version and the one the source lacks are closed");
	is(q_dst("SELECT v || ':' || valid_from_lsn || ':' || valid_to_lsn FROM ${t}_hist WHERE id = 7 AND n = -2"),
		'old:8:16', "$t: the old closed version is untouched");
	is(q_dst("SELECT string_agg(id::text, ',' ORDER BY id) FROM ${t}_writes WHERE id IN (1, 2, 3)"),
		'1,2,3', "$t: a trigger saw each close of another tenant's stale version");
	push @messages, join(' ', map { $_ // '' } values %{ AshTest::status_row($dst, $t) // {} });
	q_dst("SELECT ash_replicant_stop('$t')");	# one walsender for the next case
}

# ---------------------------------------------------------------------------
# moved: a key of a stale version moved to the other tenant before its chunk
# ---------------------------------------------------------------------------
{
	my $t = 'moved';
	# created first (copied first by the one copier)
	q_src(q{
CREATE TABLE first (id bigint PRIMARY KEY, v text, n bigint);
INSERT INTO first SELECT g, 'v', 0 FROM generate_series(1, 20) g;
});
	tables($t, 1);
	q_src("ALTER PUBLICATION pub_$t ADD TABLE first");
	AshTest::provenance_history($dst, 'first');
	# key 5's stale version under its tenant at the source (a)
	q_dst("INSERT INTO ${t}_hist (id, v, n, valid_from_lsn, tenant) VALUES (5, 'stale', -1, 16, '$S-a')");
	# one copier: first's first chunk waits at a gate, before any of moved
	my $gate = AshTest::close_gate($dst, 'first_hist', 1, 7175);
	AshTest::setup_pipeline($src, $dst, sink => $t, publication => "pub_$t", marker => 0,
		maps => [
			[ 'first_hist', source_table => 'first', history_strategy => 'scd2', history_business_key => ['id'],
			  snapshot_provenance => 'true' ],
			[ "${t}_hist", source_table => $t, history_strategy => 'scd2', history_business_key => ['id'],
			  tenant_column => 'tenant', tenant_strategy => 'attribute', snapshot_provenance => 'true' ] ],
		pipeline_extra => "go_forward_only => false, snapshot => 'incremental', chunk_rows => 4");
	ok(AshTest::gate_waiting($dst, 7175), "$t: the first table's first chunk waits at the gate");
	is(q_dst("SELECT coalesce(sum(rows_copied), 0) FROM ash_replicant.snapshot_tables WHERE source_table = '$t'"),
		'0', "$t: nothing of $t copied yet");
	my (undef, $end) = AshTest::commit_tracked($src,
		"UPDATE $t SET n = n + 1, tenant = '$S-b' WHERE id = 5");
	ok(AshTest::wait_sent($src, $end), "$t: the walsender has sent the move");
	AshTest::open_gate($gate, 7175);
	ok(complete($t), "$t: the attempt completes") or AshTest::diag_pipeline($src, $dst, $t);
	AshTest::wait_status($dst, $t, 'healthy');
	AshTest::assert_mirror_equal($src, $dst, ["${t}_v"], order_by => 'id',
		name => "$t: open versions equal the source");
	is(q_dst("SELECT string_agg(tenant || ':' || n || ':' || (valid_to_lsn IS NULL)::text, ','"
			  . " ORDER BY valid_from_lsn) FROM ${t}_hist WHERE id = 5"),
		"$S-a:-1:false,$S-b:1:true", "$t: the stale version closed, the key open under its new tenant");
	is(history_ordered($t), '', "$t: per key, versions in order without overlap");
	push @messages, join(' ', map { $_ // '' } values %{ AshTest::status_row($dst, $t) // {} });
}

# ---------------------------------------------------------------------------
# twice, plain: still tenant_conflict, nothing of the table committed
# ---------------------------------------------------------------------------
for my $case ([ 'twice', 1, 1 ], [ 'plain', 0, 0 ])
{
	my ($t, $prov, $key_with_tenant) = @$case;
	tables($t, $prov, key_with_tenant => $key_with_tenant);
	if ($key_with_tenant)
	{
		q_src("INSERT INTO $t VALUES (3, '$S-again', 0, '$S-b')");	# key 3 under both tenants
	}
	else
	{
		q_dst("INSERT INTO ${t}_hist (id, v, n, valid_from_lsn, tenant) VALUES (1, 'stale', -1, 16, '$S-b')");
	}
	my $before = AshTest::table_hash($dst, "${t}_hist", 't::text');
	pipeline($t, $prov, "snapshot => 'v1'");
	AshTest::wait_status($dst, $t, 'halted', 'tenant_conflict', src => $src,
		name => "$t: the copy halts tenant_conflict");
	is(AshTest::table_hash($dst, "${t}_hist", 't::text'), $before, "$t: nothing of the table committed");
	push @messages, join(' ', map { $_ // '' } values %{ AshTest::status_row($dst, $t) // {} });
}

my @hits = AshTenancy::grep_all_logs([$S], $src, $dst);
is(scalar(@hits), 0, 'planted values and tenants in no server log of either node')
  or diag join("\n", @hits[ 0 .. ($#hits < 9 ? $#hits : 9) ]);
my $text = AshTest::catalog_text($dst) . "\n" . join("\n", @messages);
is(index($text, $S), -1, 'planted values in no status, catalog output or error');

done_testing();
