# Updating the extension (docs/operations.md "Updating the extension"):
#   - every update path pg_extension_update_paths offers, to the default
#     version and to every other one (the rollbacks towards 0.4.0 included),
#     ends in exactly the catalogs, functions (definitions, comments, grants),
#     views, policies, row-security flags and configuration tables of a fresh
#     install of its target; paths to the default version also dump
#     (pg_dump --schema-only --binary-upgrade, extension members included)
#     exactly as a fresh install does.  A path through a 0.4 version or down
#     a version needs ash_replicant.pipelines_stopped (and, with legacy
#     checkpoints, bindings: test 071); on these empty installs that is all;
#   - a 1.1.0 library with 1.0.0 catalogs runs no pipeline: it halts
#     extension_version_mismatch and status still answers;
#   - a populated 1.0.0 install (a go-forward checkpoint with a watermark)
#     updated with ALTER EXTENSION resumes from exactly its watermark: nothing
#     lost, nothing applied twice;
#   - reconfigured with snapshot => 'v1' after the update, the same checkpoint
#     copies the rows that predate its slot and keeps streaming.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair(no_extension => 1);
my $DB = $AshTest::DB;

my $default = $dst->safe_psql($DB,
	"SELECT default_version FROM pg_available_extensions WHERE name = 'ash_replicant'");

# A canonical description of everything the extension owns in a database.
my $describe = q{
WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'ash_replicant'),
objs AS (
	SELECT d.classid, d.objid FROM pg_depend d, ext
	 WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e')
SELECT string_agg(line, E'\n' ORDER BY line) FROM (
	-- tables and views: columns, row security, grants, comments
	SELECT format('rel %s kind=%s rls=%s acl=%s comment=%s', c.oid::regclass, c.relkind,
	              c.relrowsecurity, c.relacl, obj_description(c.oid, 'pg_class')) AS line
	  FROM objs o JOIN pg_class c ON o.classid = 'pg_class'::regclass AND c.oid = o.objid
	UNION ALL
	SELECT format('col %s.%s %s notnull=%s default=%s acl=%s', c.oid::regclass, a.attname,
	              format_type(a.atttypid, a.atttypmod), a.attnotnull,
	              pg_get_expr(ad.adbin, ad.adrelid), a.attacl)
	  FROM objs o JOIN pg_class c ON o.classid = 'pg_class'::regclass AND c.oid = o.objid
	  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	  LEFT JOIN pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
	UNION ALL
	SELECT format('con %s %s %s', c.oid::regclass, pc.conname, pg_get_constraintdef(pc.oid))
	  FROM objs o JOIN pg_class c ON o.classid = 'pg_class'::regclass AND c.oid = o.objid
	  JOIN pg_constraint pc ON pc.conrelid = c.oid
	UNION ALL
	SELECT format('idx %s', pg_get_indexdef(i.indexrelid))
	  FROM objs o JOIN pg_class c ON o.classid = 'pg_class'::regclass AND c.oid = o.objid
	  JOIN pg_index i ON i.indrelid = c.oid
	UNION ALL
	SELECT format('view %s %s', c.oid::regclass, pg_get_viewdef(c.oid))
	  FROM objs o JOIN pg_class c ON o.classid = 'pg_class'::regclass AND c.oid = o.objid
	 WHERE c.relkind = 'v'
	UNION ALL
	SELECT format('pol %s %s', pol.polrelid::regclass, pol.polname)
	  FROM objs o JOIN pg_policy pol ON o.classid = 'pg_class'::regclass AND pol.polrelid = o.objid
	UNION ALL
	-- functions: definition, grants, comment
	SELECT format('fn %s acl=%s comment=%s def=%s', p.oid::regprocedure, p.proacl,
	              obj_description(p.oid, 'pg_proc'), pg_get_functiondef(p.oid))
	  FROM objs o JOIN pg_proc p ON o.classid = 'pg_proc'::regclass AND p.oid = o.objid
	UNION ALL
	SELECT format('other %s', pg_describe_object(o.classid, o.objid, 0))
	  FROM objs o WHERE o.classid NOT IN ('pg_class'::regclass, 'pg_proc'::regclass)
	UNION ALL
	SELECT format('config %s', unnest(extconfig)::regclass) FROM pg_extension WHERE extname = 'ash_replicant'
) x};

# Versions as "1.2.0": compare numerically, part by part.
sub vcmp
{
	my @a = split /\./, $_[0];
	my @b = split /\./, $_[1];
	for my $i (0 .. 2)
	{
		my $c = ($a[$i] // 0) <=> ($b[$i] // 0);
		return $c if $c;
	}
	return 0;
}

# The schema pg_dump writes for a database, extension members included
# (--binary-upgrade is the only mode that writes them), without what names a
# particular database: OIDs, transaction ids, the dump's restrict key.
sub schema_dump
{
	my ($db) = @_;
	my ($stdout, $stderr);
	IPC::Run::run([ 'pg_dump', '--schema-only', '--binary-upgrade', '-d', $dst->connstr($db) ],
		'>', \$stdout, '2>', \$stderr)
	  or die "pg_dump $db failed: $stderr";
	return join("\n", grep {
			!/^\\(un)?restrict |binary_upgrade_set_next_|binary_upgrade_create_empty_extension|relfrozenxid|datfrozenxid|WHERE oid = |WHERE datname = /
	} split /\n/, $stdout);
}

sub show_difference
{
	my ($got, $want, $what) = @_;
	my %w = map { $_ => 1 } split /\n/, $want;
	my %g = map { $_ => 1 } split /\n/, $got;
	diag "only after update ($what): $_" for grep { !$w{$_} } split /\n/, $got;
	diag "only in fresh ($what): $_" for grep { !$g{$_} } split /\n/, $want;
	return;
}

# A fresh install of every version that can be installed.
my @versions = sort { vcmp($a, $b) } split /\n/, $dst->safe_psql($DB,
	"SELECT version FROM pg_available_extension_versions WHERE name = 'ash_replicant'");
ok((grep { $_ eq '0.4.0' } @versions) && (grep { $_ eq $default } @versions),
	'installable versions: ' . join(', ', @versions));
my %fresh;
for my $v (@versions)
{
	my $db = "fresh_" . ($v =~ s/\W/_/gr);
	$dst->safe_psql($DB, "CREATE DATABASE $db");
	$dst->safe_psql($db, "CREATE EXTENSION ash_replicant VERSION '$v'");
	$fresh{$v} = $dst->safe_psql($db, $describe);
	ok(length($fresh{$v}) > 1000, "a fresh install of $v describes its catalogs");
}
my $fresh_db = "fresh_" . ($default =~ s/\W/_/gr);
my $fresh_dump = schema_dump($fresh_db);
like($fresh_dump, qr/CREATE TABLE ash_replicant\.checkpoints/, 'pg_dump writes the extension\'s catalogs');

my @paths = map { [ split / / ] } split /\n/, $dst->safe_psql($DB,
	"SELECT source || ' ' || target || ' ' || path FROM pg_extension_update_paths('ash_replicant')"
	  . " WHERE path IS NOT NULL ORDER BY target = '$default' DESC, source, target");
ok((grep { $_->[1] eq $default } @paths) >= 1, 'at least one update path to the default version');
ok((grep { $_->[0] eq '0.4.0' && $_->[1] eq $default } @paths), 'an update path from 0.4.0 to the default version');
ok((grep { $_->[0] eq '1.0.0' && $_->[1] eq '0.4.0' } @paths), 'a rollback path from 1.0.0 to 0.4.0');
my $n = 0;
for my $p (@paths)
{
	my ($from, $to, $path) = @$p;
	my @steps = split /--/, $path;
	# through a 0.4 version, or down: the operator confirms pipelines are stopped
	my $guarded = (grep { /^0\./ } @steps)
	  || (grep { vcmp($steps[$_], $steps[ $_ + 1 ]) > 0 } 0 .. $#steps - 1);
	my $db = "path_" . ++$n;
	$dst->safe_psql($DB, "CREATE DATABASE $db");
	$dst->safe_psql($db, "CREATE EXTENSION ash_replicant VERSION '$from'");
	$dst->safe_psql($db, ($guarded ? "SET ash_replicant.pipelines_stopped = on; " : '')
		  . "ALTER EXTENSION ash_replicant UPDATE TO '$to'");
	is($dst->safe_psql($db, "SELECT extversion FROM pg_extension WHERE extname = 'ash_replicant'"),
		$to, "$from updates to $to");
	my $got = $dst->safe_psql($db, $describe);
	is($got, $fresh{$to}, "update path $path equals a fresh install of $to")
	  or show_difference($got, $fresh{$to}, 'catalogs');
	if ($to eq $default)
	{
		my $dump = schema_dump($db);
		is($dump, $fresh_dump, "update path $path dumps as a fresh install")
		  or show_difference($dump, $fresh_dump, 'pg_dump');
	}
	$dst->safe_psql($DB, "DROP DATABASE $db");
}

# without the confirmation, a path from 0.4.0 is refused and changes nothing
$dst->safe_psql($DB, "CREATE DATABASE unconfirmed");
$dst->safe_psql('unconfirmed', "CREATE EXTENSION ash_replicant VERSION '0.4.0'");
my $before = $dst->safe_psql('unconfirmed', $describe);
my ($rc, $out, $err) = $dst->psql('unconfirmed', "ALTER EXTENSION ash_replicant UPDATE");
like($err, qr/update rejected: pipelines_stopped_required/, 'an update from 0.4.0 needs ash_replicant.pipelines_stopped');
is($dst->safe_psql('unconfirmed', $describe), $before, 'the refused update changed nothing');

# ---------------------------------------------------------------------------
# A populated 1.0.0 install.
# ---------------------------------------------------------------------------
$dst->safe_psql($DB, "CREATE EXTENSION ash_replicant VERSION '1.0.0'");
AshTest::both($src, $dst, "CREATE TABLE acct (id int PRIMARY KEY, bal int NOT NULL)");
$dst->safe_psql($DB, AshTest::write_audit_sql('acct', 'int'));
# rows older than the slot: a go-forward pipeline never sees them
$src->safe_psql($DB, "INSERT INTO acct SELECT g, 0 FROM generate_series(1, 500) g");
$src->safe_psql($DB, "CREATE PUBLICATION pub_up FOR TABLE acct");

# the 1.1.0 library refuses to run a pipeline on 1.0.0 catalogs
AshTest::setup_pipeline($src, $dst, sink => 'up', publication => 'pub_up', maps => [ ['acct'] ]);
AshTest::wait_status($dst, 'up', 'misconfigured', 'extension_version_mismatch');
ok(scalar(AshTest::log_lines_like($dst,
		qr/event=pipeline\.halt sink=up reason=extension_version_mismatch class=misconfigured context=".*ALTER EXTENSION ash_replicant UPDATE/)),
	'the worker says an update is needed');
is($dst->safe_psql($DB, "SELECT count(*) FROM pg_replication_slots"), '0', 'no slot was created');

# a 1.0.0 checkpoint as that version left it: bound, with a watermark
AshTest::stop_sink($dst, 'up');
$dst->safe_psql($DB, "ALTER EXTENSION ash_replicant UPDATE TO '$default'");
AshTest::start_sink($dst, 'up');
$src->safe_psql($DB, "UPDATE acct SET bal = bal + 1 WHERE id <= 100; INSERT INTO acct VALUES (501, 1)");
ok(AshTest::wait_caught_up($src, $dst, 'up'), 'streams after the update');
# 1.3.0: the worker creates the origin its writes carry on first use
is($dst->safe_psql($DB,
		"SELECT count(*) FROM pg_replication_origin o JOIN pg_replication_origin_status s"
		  . " ON s.local_id = o.roident WHERE o.roname = 'ash_replicant_up' AND s.remote_lsn <> '0/0'"),
	'1', 'after the update the pipeline tags its writes with the origin named for its sink');
$dst->safe_psql($DB, "SELECT ash_replicant_stop('up')");
AshTest::poll($dst, "SELECT worker_pid IS NULL FROM ash_replicant_status('up')");
my $wm = $dst->safe_psql($DB, "SELECT commit_lsn FROM ash_replicant.checkpoints");

# roll the catalogs back to 1.0.0's shape with the same checkpoint row: drop
# and re-create at 1.0.0 keeping the rows (what a 1.0.0 install held)
my $keep = $dst->safe_psql($DB, q{
SELECT json_build_object(
  'sinks', (SELECT json_agg(s) FROM ash_replicant.sinks s),
  'pipelines', (SELECT json_agg(p) FROM ash_replicant.pipelines p),
  'resources', (SELECT json_agg(r) FROM ash_replicant.resources r),
  'checkpoints', (SELECT json_agg(c) FROM (SELECT source_system_id, source_database, slot_name, timeline_id,
      commit_lsn, end_lsn, decoder, contract, contract_fingerprint FROM ash_replicant.checkpoints) c))});
$dst->safe_psql($DB, "DROP EXTENSION ash_replicant; CREATE EXTENSION ash_replicant VERSION '1.0.0'");
$dst->safe_psql($DB, qq{
INSERT INTO ash_replicant.sinks SELECT * FROM json_populate_recordset(NULL::ash_replicant.sinks, '$keep'::json->'sinks');
INSERT INTO ash_replicant.pipelines SELECT * FROM json_populate_recordset(NULL::ash_replicant.pipelines, '$keep'::json->'pipelines');
INSERT INTO ash_replicant.resources OVERRIDING SYSTEM VALUE SELECT * FROM json_populate_recordset(NULL::ash_replicant.resources, '$keep'::json->'resources');
INSERT INTO ash_replicant.checkpoints (source_system_id, source_database, slot_name, timeline_id,
    commit_lsn, end_lsn, decoder, contract, contract_fingerprint)
  SELECT source_system_id, source_database, slot_name, timeline_id, commit_lsn, end_lsn, decoder,
         contract, contract_fingerprint
    FROM json_populate_recordset(NULL::ash_replicant.checkpoints, '$keep'::json->'checkpoints');
});
$src->safe_psql($DB, "UPDATE acct SET bal = bal + 10 WHERE id > 400");
$dst->safe_psql($DB, "ALTER EXTENSION ash_replicant UPDATE");
is($dst->safe_psql($DB, "SELECT commit_lsn FROM ash_replicant.checkpoints"), $wm,
	'the update keeps the watermark');
AshTest::start_sink($dst, 'up');
ok(AshTest::wait_caught_up($src, $dst, 'up'), 'resumes after the update');
AshTest::assert_mirror_equal($src, $dst, ['acct'], where => 'id > 400',
	name => 'changes made while on 1.0.0 catalogs arrived');
is($dst->safe_psql($DB,
	"SELECT count(*) FROM (SELECT id FROM acct_audit GROUP BY id, op HAVING count(*) > 1 AND op = 'INSERT') x"),
	'0', 'nothing applied twice');
cmp_ok($dst->safe_psql($DB, "SELECT count(*) FROM acct"), '<', 501,
	'go-forward: rows older than the slot that never changed are absent');

# the same checkpoint switched to a snapshot copies what predates its slot
AshTest::stop_sink($dst, 'up');
my ($sysid, $sdb) = AshTest::source_identity($src);
$dst->safe_psql($DB, "SELECT ash_replicant_configure_pipeline('up', connection => "
	  . AshTest::lit(AshTest::conninfo($src)) . ", publication => 'pub_up', source_system_identifier => '$sysid',"
	  . " source_database => '$sdb', census => '{\"interval_ms\": 1000}', go_forward_only => false, snapshot => 'v1')");
AshTest::start_sink($dst, 'up');
$src->safe_psql($DB, "UPDATE acct SET bal = bal + 100 WHERE id % 50 = 0");
ok(AshTest::wait_caught_up($src, $dst, 'up'), 'caught up after switching to a snapshot');
AshTest::assert_mirror_equal($src, $dst, ['acct'], name => 'go-forward checkpoint switched to v1');

done_testing();
