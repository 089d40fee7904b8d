# A snapshot over a mirror whose rows moved to another tenant while nothing
# streamed (docs/reasons.md#tenant_conflict): attribute tenancy, the target's
# identity the source's key.  The source is authoritative at its snapshot,
# where a key names one row.
#
#  prov    SCD1 with provenance (v1, then a re-seed after a reset): a target row
#          of another tenant that the attempt has not seen is stale and is
#          replaced by the source's (before: halted tenant_conflict at the
#          first such row); mirror = source, the stale rows' other columns
#          gone, a trigger saw one UPDATE per moved row; a second snapshot of
#          an unchanged source rewrites nothing
#  twice   the source holds one key under two tenants (its key includes the
#          tenant, the target's identity does not): the second copied row
#          meets the one the attempt wrote: still tenant_conflict, nothing of
#          the table committed; so too where an empty target's rows go in
#          without the upsert (direct, with its index built after them;
#          gathered, a trigger on it; an incremental chunk), which halted
#          apply_failed 23505 before
#  plain   without provenance such a stale row cannot be told from another
#          source row: tenant_conflict, nothing committed
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair(log_statement => 'none',
	dst_conf => "ash_replicant.keyring_file = 'keyring'\n");
AshTenancy::write_keyring($dst, 'keyring', "snapshot_provenance 1 " . AshTenancy::key_hex(21));
my ($sysid, $sdb) = AshTest::source_identity($src);
my $S = AshTenancy::sentinel();

sub q_dst { return $dst->safe_psql($DB, $_[0]); }

AshTest::both($src, $dst, q{
CREATE TABLE docs (id int PRIMARY KEY, tenant text NOT NULL, v text);
CREATE TABLE plain (id int PRIMARY KEY, tenant text NOT NULL, v text);
});
$src->safe_psql($DB, q{
ALTER TABLE docs REPLICA IDENTITY FULL;
ALTER TABLE plain REPLICA IDENTITY FULL;
CREATE TABLE twice (id int, tenant text, v text, PRIMARY KEY (id, tenant));
ALTER TABLE twice REPLICA IDENTITY FULL;
INSERT INTO docs SELECT g, CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END, 'v' || g FROM generate_series(1, 2000) g;
INSERT INTO plain SELECT g, 'a', 'v' || g FROM generate_series(1, 50) g;
INSERT INTO twice SELECT g, 'a', 'v' || g FROM generate_series(1, 50) g;
INSERT INTO twice VALUES (7, 'b', 'seven again');
CREATE PUBLICATION pub_docs FOR TABLE docs;
CREATE PUBLICATION pub_plain FOR TABLE plain;
CREATE PUBLICATION pub_twice FOR TABLE twice;
});
$dst->safe_psql($DB, qq{
ALTER TABLE docs ADD COLUMN replica_fingerprint bytea, ADD COLUMN replica_seen_attempt bytea;
CREATE TABLE twice (id int PRIMARY KEY, tenant text NOT NULL, v text,
	replica_fingerprint bytea, replica_seen_attempt bytea);
CREATE TABLE audit (op text, id int, old_tenant text, new_tenant text);
CREATE FUNCTION audit_fn() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	INSERT INTO audit VALUES (TG_OP, NEW.id, CASE WHEN TG_OP = 'UPDATE' THEN OLD.tenant END, NEW.tenant);
	RETURN NULL;
END \$\$;
CREATE TRIGGER docs_audit AFTER INSERT OR UPDATE ON docs FOR EACH ROW EXECUTE FUNCTION audit_fn();
-- the mirror as an earlier pipeline left it: rows 1-10 under the other
-- tenant (they moved at the source since), row 3000 the source lacks
INSERT INTO docs (id, tenant, v) SELECT g, CASE WHEN g % 2 = 0 THEN 'b' ELSE 'a' END, 'stale $S'
  FROM generate_series(1, 10) g;
INSERT INTO docs (id, tenant, v) VALUES (3000, 'a', 'gone $S');
INSERT INTO plain (id, tenant, v) VALUES (5, 'b', 'stale $S');
TRUNCATE audit;
});

# the mapped columns at both ends (the target adds the provenance columns)
sub same
{
	my ($t, $name) = @_;
	my $sql = "SELECT md5(coalesce(string_agg(id || ':' || tenant || ':' || coalesce(v, '~'), ',' ORDER BY id), ''))"
	  . " || ' ' || count(*) FROM $t";
	is($dst->safe_psql($DB, $sql), $src->safe_psql($DB, $sql), $name);
}

sub tenant_map
{
	my ($t, %o) = @_;
	return [ $t, tenant_column => 'tenant', tenant_strategy => 'attribute', %o ];
}

# prov: the stale rows of another tenant are replaced
AshTest::setup_pipeline($src, $dst, sink => 'sp', publication => 'pub_docs',
	maps => [ tenant_map('docs', snapshot_provenance => 'true') ],
	pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
AshTest::wait_status($dst, 'sp', 'healthy', undef, src => $src,
	name => 'prov: the snapshot over moved rows ends healthy');
AshTest::wait_caught_up($src, $dst, 'sp', name => 'prov: caught up');
same('docs', 'prov: mirror = source');
is(q_dst("SELECT count(*) FROM audit WHERE op = 'UPDATE' AND old_tenant <> new_tenant"), '10',
	'prov: each moved row was replaced once, in place');
is(q_dst("SELECT count(*) FROM docs WHERE v LIKE '%$S%'"), '0', 'prov: no stale value left');

# a re-seed: rows move while the pipeline is stopped and nothing streams them
AshTest::stop_settled($src, $dst, 'sp');
$src->safe_psql($DB, "UPDATE docs SET tenant = CASE tenant WHEN 'a' THEN 'b' ELSE 'a' END WHERE id BETWEEN 100 AND 119");
$dst->safe_psql($DB, "SELECT ash_replicant_reset_checkpoint('sp', " . AshTest::lit($sysid) . ", "
	  . AshTest::lit($sdb) . ")");
q_dst('TRUNCATE audit');
AshTest::start_sink($dst, 'sp');
AshTest::wait_status($dst, 'sp', 'healthy', undef, src => $src, name => 'prov: the re-seed ends healthy');
AshTest::wait_caught_up($src, $dst, 'sp', name => 'prov: re-seed caught up');
same('docs', 'prov: re-seeded mirror = source');
is(q_dst("SELECT count(*) || '/' || count(*) FILTER (WHERE old_tenant <> new_tenant) FROM audit"), '20/20',
	'prov: the re-seed rewrote only the 20 moved rows');
$src->safe_psql($DB, "UPDATE docs SET tenant = 'c' WHERE id = 1");
AshTest::wait_caught_up($src, $dst, 'sp', name => 'prov: a streamed move');
same('docs', 'prov: streams on');
AshTest::stop_sink($dst, 'sp');

# twice: one key under two tenants at the source
{
	AshTest::setup_pipeline($src, $dst, sink => 'st', publication => 'pub_twice', marker => 0,
		maps => [ tenant_map('twice', snapshot_provenance => 'true') ],
		pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
	AshTest::wait_status($dst, 'st', 'halted', undef, src => $src,
		name => 'twice: halted');
	my $st = AshTest::status_row($dst, 'st') // {};
	is($st->{reason} // '', 'tenant_conflict', 'twice: a tenant conflict halts')
	  or diag explain $st;
	is(q_dst('SELECT count(*) FROM twice'), '0', 'twice: nothing of the table committed');
	AshTest::stop_sink($dst, 'st');
}

# twice, no provenance: an empty target the sink's owner owns takes the
# direct path, its index built after the rows; a key under two tenants
# fails that build (direct) or the multi-row insert of a target with a
# trigger (gathered): apply_failed 23505 before; in a target holding a row
# already, the upsert finds the other tenant's row (upsert); an
# incremental snapshot's chunk into its empty target as 'direct'
for my $shape ('direct', 'gathered', 'upsert', 'incremental')
{
	my $t = "twice_$shape";
	$src->safe_psql($DB, qq{
CREATE TABLE $t (id int, tenant text, v text, PRIMARY KEY (id, tenant));
ALTER TABLE $t REPLICA IDENTITY FULL;
INSERT INTO $t SELECT g, 'a', 'v' || g FROM generate_series(1, 50) g;
INSERT INTO $t VALUES (7, 'b', 'seven again $S');
CREATE PUBLICATION pub_$t FOR TABLE $t;
});
	my $incr = $shape eq 'incremental';
	q_dst("CREATE TABLE $t (id int PRIMARY KEY, tenant text NOT NULL, v text"
		  . ($incr ? ', replica_fingerprint bytea, replica_seen_attempt bytea' : '') . ')');
	# a trigger keeps the rows off the direct path: one multi-row upsert
	q_dst("CREATE TRIGGER ${t}_audit AFTER INSERT OR UPDATE ON $t FOR EACH ROW EXECUTE FUNCTION audit_fn()")
	  if $shape eq 'gathered';
	q_dst("INSERT INTO $t VALUES (1000, 'a', 'kept')") if $shape eq 'upsert';
	AshTest::setup_pipeline($src, $dst, sink => "s$shape", publication => "pub_$t", marker => 0,
		maps => [ tenant_map($t, $incr ? (snapshot_provenance => 'true') : ()) ],
		pipeline_extra => "go_forward_only => false, snapshot => '" . ($incr ? 'incremental' : 'v1') . "'");
	AshTest::wait_status($dst, "s$shape", 'halted', undef, src => $src, name => "$t: halted");
	my $st = AshTest::status_row($dst, "s$shape") // {};
	is($st->{reason} // '', 'tenant_conflict', "$t: a tenant conflict halts") or diag explain $st;
	is(q_dst("SELECT count(*) FROM $t"), $shape eq 'upsert' ? '1' : '0', "$t: nothing of the table committed");
	like(AshTest::halt_line($dst, "s$shape", 'tenant_conflict'), qr/identity in public\.$t\)/, "$t: the halt says why");
	AshTest::stop_sink($dst, "s$shape");
}

# plain: no provenance, no way to tell a stale row
{
	AshTest::setup_pipeline($src, $dst, sink => 'sn', publication => 'pub_plain', marker => 0,
		maps => [ tenant_map('plain') ],
		pipeline_extra => "go_forward_only => false, snapshot => 'v1'");
	AshTest::wait_status($dst, 'sn', 'halted', 'tenant_conflict', src => $src,
		name => 'plain: halted tenant_conflict');
	is(q_dst('SELECT count(*) FROM plain'), '1', 'plain: nothing of the table committed');
	AshTest::stop_sink($dst, 'sn');
}

my @hits = AshTest::grep_logs_for($S, $dst);
is(scalar(@hits), 0, 'no stale value in any destination log line');

done_testing();
