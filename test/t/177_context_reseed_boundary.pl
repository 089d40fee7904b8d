# An incremental re-seed of SCD2 history under context tenancy (schema per
# tenant) of a key the source moved to another tenant while nothing
# streamed (found by an exploratory test).  The chunk holding the key opens
# its version in the new tenant's table at the chunk's position; the old
# tenant's version, unseen, was closed only by the table's last chunk, at
# that later position: for the LSNs between, the history said the key
# belonged to both tenants (docs/history-and-events.md: a tenant change
# closes the old version and opens the new one at the same LSN).
#
#   boundary  one copier, one chunk window: key 1's chunk is written, the
#             next chunk waits at a gate while another table commits, so
#             the table's last chunk comes at a later position (asserted);
#             then: the old tenant's version closed exactly where the new
#             one opened, no key valid in two tenants' tables over the same
#             LSNs, open versions equal the source, the close a host write
#             (a trigger sees it), healthy
#   halts     the incremental arming check (snapshot_history_ahead) and a
#             scope without its table (tenant_scope_missing) name the
#             mapping's target: status halt_target, the log's pipeline.halt
#             line table=
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\nash_replicant.snapshot_workers = 1\n");
AshTenancy::write_keyring($dst, 'keyring', 'snapshot_provenance 1 ' . AshTenancy::key_hex(33));
$dst->reload;
sub q_src { return $src->safe_psql($DB, $_[0]); }
sub q_dst { return $dst->safe_psql($DB, $_[0]); }
my ($sysid, $sdb) = AshTest::source_identity($src);
my $sink = 'cb';
my $conn = AshTest::conninfo($src);

sub complete
{
	return AshTest::poll($dst, AshTest::checkpoint_sql($sink, "c.snapshot_phase = 'complete'"), 't');
}

# ---------------------------------------------------------------------------
# boundary
# ---------------------------------------------------------------------------
q_src(q{
CREATE TABLE docs (id integer PRIMARY KEY, tenant text NOT NULL, val text);
ALTER TABLE docs REPLICA IDENTITY FULL;
INSERT INTO docs SELECT g, CASE WHEN g % 2 = 0 THEN 'ta' ELSE 'tb' END, 'v' || g FROM generate_series(1, 95) g;
CREATE TABLE other (id integer PRIMARY KEY, x integer);
CREATE PUBLICATION pub_cb FOR TABLE docs, other;
CREATE VIEW docs_v AS SELECT id, tenant, val FROM docs;
});
q_dst(q{
CREATE TABLE docs_hist (
	vid bigserial PRIMARY KEY, id integer NOT NULL, tenant text NOT NULL, val text,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint,
	replica_fingerprint bytea, replica_seen_attempt bytea, UNIQUE (id, valid_from_lsn));
CREATE UNIQUE INDEX docs_hist_open ON docs_hist (id) WHERE valid_to_lsn IS NULL;
CREATE TABLE other (id integer PRIMARY KEY, x integer, replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE FUNCTION scopes() RETURNS SETOF text LANGUAGE sql STABLE AS $$ VALUES ('ta'), ('tb') $$;
CREATE SCHEMA ta; CREATE SCHEMA tb;
CREATE TABLE ta.docs_hist (LIKE public.docs_hist INCLUDING ALL);
CREATE TABLE tb.docs_hist (LIKE public.docs_hist INCLUDING ALL);
CREATE VIEW docs_v AS
	SELECT id, tenant, val FROM ta.docs_hist WHERE valid_to_lsn IS NULL
	UNION ALL SELECT id, tenant, val FROM tb.docs_hist WHERE valid_to_lsn IS NULL;
CREATE VIEW docs_all AS
	SELECT 'ta' AS s, * FROM ta.docs_hist UNION ALL SELECT 'tb', * FROM tb.docs_hist;
CREATE TABLE closes (id integer, valid_from_lsn bigint, valid_to_lsn bigint);
CREATE FUNCTION tb_closed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.closes VALUES (NEW.id, NEW.valid_from_lsn, NEW.valid_to_lsn);
	RETURN NULL;
END $$;
CREATE TRIGGER tb_closed AFTER UPDATE ON tb.docs_hist FOR EACH ROW
	WHEN (OLD.valid_to_lsn IS NULL AND NEW.valid_to_lsn IS NOT NULL) EXECUTE FUNCTION tb_closed();
});
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_cb', marker => 0,
	maps => [ [ 'docs_hist', source_table => 'docs', history_strategy => 'scd2', history_business_key => ['id'],
			tenant_column => 'tenant', tenant_strategy => 'context', snapshot_provenance => 'true',
			tenant_scope_function => 'public.scopes()' ],
		[ 'other', snapshot_provenance => 'true' ] ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
ok(complete(), 'boundary: the v1 copy completes') or AshTest::diag_pipeline($src, $dst, $sink);
is(q_dst("SELECT (SELECT count(*) FROM ta.docs_hist) || '/' || (SELECT count(*) FROM tb.docs_hist)"), '47/48',
	'boundary: rows in their tenants\' tables');
AshTest::stop_settled($src, $dst, $sink);

# while stopped: key 1 moves from tb to ta; keys 11 (the second chunk's,
# held at the gate) and 95 (the last chunk's) change, so both chunks write
# a version (an unchanged row is only marked seen)
q_src(q{
UPDATE docs SET tenant = 'ta', val = 'moved' WHERE id = 1;
UPDATE docs SET val = 'changed' WHERE id IN (11, 95);
});
q_dst("SELECT ash_replicant_configure_pipeline('$sink', connection => " . AshTest::lit($conn) . ", publication => 'pub_cb',"
	  . " source_system_identifier => '$sysid', source_database => '$sdb', go_forward_only => false,"
	  . " snapshot => 'incremental', chunk_rows => 10, max_pending_chunks => 1)");
is(q_dst("SELECT ash_replicant_reset_checkpoint('$sink', '$sysid', '$sdb')"), 't', 'boundary: reset (incremental re-seed)');
my $gate = AshTest::close_gate($dst, 'tb.docs_hist', 11, 7177);
AshTest::start_sink($dst, $sink);
ok(AshTest::gate_waiting($dst, 7177), 'boundary: the second chunk waits at the gate');
is(q_dst("SELECT count(*) FROM ta.docs_hist WHERE id = 1 AND valid_to_lsn IS NULL AND val = 'moved'"), '1',
	'boundary: key 1 open in its new tenant\'s table (first chunk written)');
# the stream's watermark moves on past key 1's chunk before the last chunk:
# with one chunk window, a chunk read after this commit waits until the
# stream has delivered it
my (undef, $end) = AshTest::commit_tracked($src, "INSERT INTO other VALUES (1, 1)");
ok(AshTest::wait_sent($src, $end), 'boundary: the walsender has sent another table\'s commit');
AshTest::open_gate($gate, 7177);
ok(complete(), 'boundary: the incremental re-seed completes') or AshTest::diag_pipeline($src, $dst, $sink);
AshTest::wait_status($dst, $sink, 'healthy', undef, name => 'boundary: healthy');

my $history = q_dst(q{SELECT string_agg(s || ' ' || val || ' ' || valid_from_lsn || '-' || coalesce(valid_to_lsn::text, 'open'),
	'; ' ORDER BY valid_from_lsn, s) FROM docs_all WHERE id = 1});
note "key 1: $history";
my $moved_at = q_dst("SELECT valid_from_lsn FROM ta.docs_hist WHERE id = 1 AND valid_to_lsn IS NULL");
ok(q_dst("SELECT valid_from_lsn > $moved_at FROM tb.docs_hist WHERE id = 95 AND valid_to_lsn IS NULL") eq 't',
	'boundary: precondition: the last chunk\'s position is past key 1\'s chunk\'s');
is(q_dst("SELECT valid_to_lsn FROM tb.docs_hist WHERE id = 1 AND val = 'v1'"), $moved_at,
	'boundary: the old tenant\'s version closed exactly where the new one opened') or diag "key 1: $history";
is(q_dst(q{SELECT count(*) FROM ta.docs_hist a JOIN tb.docs_hist b USING (id)
	WHERE a.valid_from_lsn < coalesce(b.valid_to_lsn, 9223372036854775807)
	  AND b.valid_from_lsn < coalesce(a.valid_to_lsn, 9223372036854775807)}), '0',
	'boundary: no key valid in two tenants\' tables over the same LSN window');
is(q_dst(q{SELECT count(*) FROM docs_all x JOIN docs_all y ON x.id = y.id AND x.s = y.s AND x.vid < y.vid
	WHERE x.valid_from_lsn < coalesce(y.valid_to_lsn, 9223372036854775807)
	  AND y.valid_from_lsn < coalesce(x.valid_to_lsn, 9223372036854775807)}), '0',
	'boundary: per tenant table, no key\'s versions overlap');
is(q_dst("SELECT count(*) FROM docs_all WHERE valid_to_lsn <= valid_from_lsn"), '0',
	'boundary: every closed version ends after it starts');
AshTest::assert_mirror_equal($src, $dst, ['docs_v'], order_by => 'id',
	name => 'boundary: open versions equal the source');
is(q_dst("SELECT string_agg(id || ':' || valid_to_lsn, ',') FROM closes WHERE id = 1"), "1:$moved_at",
	'boundary: a trigger saw the close of the old tenant\'s version (a host write)');

# ---------------------------------------------------------------------------
# halts name the mapping's target
# ---------------------------------------------------------------------------
sub halt_named
{
	my ($label, $reason, $offset) = @_;
	my $row = AshTest::status_row($dst, $sink) // {};
	is($row->{halt_target} // '', 'public.docs_hist', "$label: status names the target (halt_target)");
	my $log = slurp_file($dst->logfile, $offset);
	like($log, qr/event=pipeline\.halt sink=$sink reason=$reason class=\w+ (?:sqlstate=\w+ )?table=public\.docs_hist/,
		"$label: the log's pipeline.halt line names the target");
	return;
}

AshTest::stop_settled($src, $dst, $sink);
q_dst(q{INSERT INTO ta.docs_hist (id, tenant, val, valid_from_lsn, valid_to_lsn) VALUES (7000, 'ta', 'ahead', 100, 9000000000000000)});
is(q_dst("SELECT ash_replicant_reset_checkpoint('$sink', '$sysid', '$sdb')"), 't', 'halts: reset (incremental)');
my $offset = -s $dst->logfile;
AshTest::start_sink($dst, $sink);
AshTest::wait_status($dst, $sink, 'misconfigured', 'snapshot_history_ahead',
	name => 'halts: a version past the position halts snapshot_history_ahead when the table is armed');
halt_named('snapshot_history_ahead', 'snapshot_history_ahead', $offset);
q_dst("DELETE FROM ta.docs_hist WHERE id = 7000");

q_dst(q{CREATE OR REPLACE FUNCTION scopes() RETURNS SETOF text LANGUAGE sql STABLE AS $$ VALUES ('ta'), ('tb'), ('tc') $$});
$offset = -s $dst->logfile;
AshTest::start_sink($dst, $sink);
AshTest::wait_status($dst, $sink, 'halted', 'tenant_scope_missing',
	name => 'halts: a scope without its table halts tenant_scope_missing');
halt_named('tenant_scope_missing', 'tenant_scope_missing', $offset);
q_dst(q{CREATE OR REPLACE FUNCTION scopes() RETURNS SETOF text LANGUAGE sql STABLE AS $$ VALUES ('ta'), ('tb') $$});
AshTest::start_sink($dst, $sink);
ok(complete(), 'halts: the re-seed completes once the scopes have their tables')
  or AshTest::diag_pipeline($src, $dst, $sink);
AshTest::wait_status($dst, $sink, 'healthy', undef, name => 'halts: healthy');
AshTest::assert_mirror_equal($src, $dst, ['docs_v'], order_by => 'id',
	name => 'halts: open versions equal the source');

done_testing();
