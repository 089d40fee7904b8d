# A target changed after registration (docs/operations.md, "Target DDL while
# streaming"): registration validates a target once, but the DDL an operator
# runs later can make it one registration would refuse -- and some such
# targets take the writes without an error and keep something else than the
# source has.  The worker judges a target again with registration's rules
# before it writes to it after any change to its definition (and the census
# judges every target); a target that fails halts census_drift naming the
# registration code, before anything of the transaction is written.
#
#   1  a state mirror whose key column is given a nondeterministic
#      collation: two source keys differing only in case would be one row
#      (the previous build merged them, healthy).
#   1b a state mirror's target renamed and another table created under its
#      name: the worker's statements name the new table (the previous
#      build wrote into it, healthy, until the census halted); halts
#      census_drift before any write; reverted, it applies exactly.
#   2  an append log given a BEFORE ROW trigger that drops rows: events
#      lost (the previous build: healthy, the event missing).
#   3  an append log given an ON INSERT ... DO INSTEAD NOTHING rule: the
#      same.
#   4  state-mirror targets with rules: refused at registration
#      (config_invalid) -- an INSERT or UPDATE rule (INSERT ... ON CONFLICT
#      cannot run against it), any DO INSTEAD rule (it replaces the write);
#      an ON DELETE ... DO ALSO rule is accepted; a DO INSTEAD rule created
#      after registration halts census_drift at the first write (the
#      previous build: apply_failed XX000 after four attempts).
#   5  context tenancy: a tenant's table with a nondeterministic key
#      collation is judged as the template was, at its first write: halts
#      census_drift naming the code, the tenant's schema in no log line.
#   6  (not drift, the same shape of fault) a column_map renaming a source
#      column onto another source column's name: the first change halts
#      delivery_config_invalid naming both (the previous build:
#      apply_failed 42701 after four attempts); skipped, it applies.
#   7  unlogged targets: a crash of the destination empties them while the
#      checkpoint stays (the previous build, kill -9 after a v1 copy of 100
#      rows: 10 rows left, healthy).  Registration refuses an unlogged
#      target and a partitioned one with an unlogged partition
#      (config_invalid), or with a foreign partition (destination_not_local:
#      its rows would be committed elsewhere, apart from the checkpoint); a target set UNLOGGED under a running pipeline
#      halts census_drift at the next write; set LOGGED again, it applies.
#   8  a state mirror's BEFORE ROW trigger returning NULL for some rows
#      (the previous build: healthy, an insert missing, an update and a
#      delete not applied): an insert (of a gathered run), an update and a
#      delete it keeps out halt destination_write_suppressed, nothing of
#      the transaction committed, the checkpoint unchanged; the trigger
#      letting it through, a start applies it; a delete of a row the
#      mirror lacks is counted (missing_row_deletes), not a halt; doctor
#      warns target_before_row_trigger naming target and trigger.  SCD2
#      history the same: a version opened or closed that the trigger keeps
#      out (the previous build: apply_failed XX000 after the retries).
#   Each of 1-7: nothing of the transaction committed, the watermark
#   unmoved, doctor fails destination_mappings with the registration code;
#   the change reverted, a plain start applies the transaction once.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = $AshTest::DB;
my ($src, $dst) = AshTest::start_pair();

sub q_dst { return $dst->safe_psql($DB, $_[0]); }
sub q_src { return $src->safe_psql($DB, $_[0]); }

AshTest::both($src, $dst, q{
CREATE TABLE kd (k text PRIMARY KEY, v text);
CREATE TABLE rk (id integer PRIMARY KEY, v text);
CREATE TABLE ra (id integer PRIMARY KEY, v text);
CREATE TABLE rx (id integer PRIMARY KEY, v text);
});
my $structural = AshTest::append_log_columns();
my $axes = AshTest::append_log_axes();
my $emark = AshTest::marker_table('e');
q_src(qq{
CREATE TABLE ev (id integer PRIMARY KEY, v text);
ALTER TABLE ev REPLICA IDENTITY FULL;
CREATE TABLE $emark (id bigint PRIMARY KEY, note text);
ALTER TABLE $emark REPLICA IDENTITY FULL;
INSERT INTO kd VALUES ('a', 'lower a');
INSERT INTO rk SELECT g, 'row ' || g FROM generate_series(1, 10) g;
INSERT INTO ra SELECT g, 'row ' || g FROM generate_series(1, 10) g;
CREATE PUBLICATION pub_kd FOR TABLE kd;
CREATE PUBLICATION pub_ev FOR TABLE ev, $emark;
CREATE PUBLICATION pub_rk FOR TABLE rk, ra;
});
q_dst(qq{
CREATE TABLE ev ($structural, id integer, v text, UNIQUE ($axes));
CREATE TABLE $emark ($structural, id bigint, note text, UNIQUE ($axes));
CREATE COLLATION nocase (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
});

my $v1 = "go_forward_only => false, snapshot => 'v1'";

# The halt of one sink: census_drift, its log line naming the registration
# code and the target, nothing of the transaction committed.
sub drift_halts
{
	my (%o) = @_;
	my ($sink, $code, $table) = @o{qw(sink code table)};
	AshTest::wait_status($dst, $sink, 'halted', 'census_drift',
		name => "$o{what}: halts census_drift");
	my @lines = AshTest::log_lines_like($dst,
		qr/event=pipeline\.halt sink=$sink reason=census_drift .*context=".*mapping of .*: \Q$code\E \(.*\Q$table\E/);
	ok(@lines >= 1, "... the halt names $code and the target $table");
	like(q_dst("SELECT verdict || '/' || reason FROM ash_replicant_doctor('$sink') WHERE check_name = 'destination_mappings'"),
		qr{^fail/\Q$code\E$}, "... doctor fails destination_mappings with $code");
	return;
}

# ---------------------------------------------------------------------------
# 1: a nondeterministic collation on a state mirror's key
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'k', publication => 'pub_kd',
	maps => [ ['kd'] ], pipeline_extra => $v1);
AshTest::wait_caught_up($src, $dst, 'k', name => 'k copies and streams')
  or BAIL_OUT('sink k never streamed');
q_dst('ALTER TABLE kd ALTER COLUMN k TYPE text COLLATE nocase');
my $facts = AshTest::checkpoint_facts($dst, 'k');
q_src(q{INSERT INTO kd VALUES ('A', 'upper a'), ('b', 'lower b')});
drift_halts(sink => 'k', code => 'config_invalid', table => '"public"."kd"',
	what => 'a key column given a nondeterministic collation');
AshTest::halt_left_nothing($dst, 'k', 'SELECT count(*) FROM kd', '1', $facts);
q_dst('ALTER TABLE kd ALTER COLUMN k TYPE text COLLATE "C"');
AshTest::start_sink($dst, 'k');
AshTest::wait_caught_up($src, $dst, 'k', name => 'k applies it with the collation reverted');
AshTest::assert_mirror_equal($src, $dst, ['kd']);

# ---------------------------------------------------------------------------
# 1b: the target renamed and another table created under its name: the
# statements name the new one (the previous build wrote into it, healthy,
# until the next census)
# ---------------------------------------------------------------------------
q_dst(q{BEGIN; ALTER TABLE kd RENAME TO kd_old; CREATE TABLE kd (LIKE kd_old INCLUDING ALL); COMMIT;});
$facts = AshTest::checkpoint_facts($dst, 'k');
q_src(q{INSERT INTO kd VALUES ('c', 'swapped'); UPDATE kd SET v = 'changed' WHERE k = 'b'});
AshTest::wait_status($dst, 'k', 'halted', 'census_drift',
	name => 'a target renamed and replaced under its name: halts census_drift');
is(q_dst('SELECT count(*) FROM kd'), '0', '... nothing written into the table now under its name');
is(AshTest::checkpoint_facts($dst, 'k'), $facts, '... the checkpoint unchanged');
q_dst(q{BEGIN; DROP TABLE kd; ALTER TABLE kd_old RENAME TO kd; COMMIT;});
AshTest::start_sink($dst, 'k');
AshTest::wait_caught_up($src, $dst, 'k', name => 'k applies it with the rename reverted');
AshTest::assert_mirror_equal($src, $dst, ['kd'], name => 'the rename reverted: mirror equals source');

# ---------------------------------------------------------------------------
# 2, 3: an append log given a row-dropping trigger, then a rule
# ---------------------------------------------------------------------------
AshTest::setup_append_log($src, $dst, 'e', 'pub_ev', "'ev'::regclass, append_log => true");
AshTest::wait_caught_up($src, $dst, 'e', name => 'e streams')
  or BAIL_OUT('sink e never streamed');
q_src(q{INSERT INTO ev VALUES (1, 'first')});
AshTest::wait_caught_up($src, $dst, 'e', name => 'e logs the first event');
is(q_dst('SELECT count(*) FROM ev'), '1', 'one event');

q_dst(q{
CREATE FUNCTION drop_odd() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN IF NEW.id % 2 = 1 THEN RETURN NULL; END IF; RETURN NEW; END$$;
CREATE TRIGGER drop_odd BEFORE INSERT ON ev FOR EACH ROW EXECUTE FUNCTION drop_odd();
});
$facts = AshTest::checkpoint_facts($dst, 'e');
q_src(q{INSERT INTO ev VALUES (2, 'second'), (3, 'third')});
drift_halts(sink => 'e', code => 'append_log_invalid', table => '"public"."ev"',
	what => 'an append log given a BEFORE ROW trigger');
AshTest::halt_left_nothing($dst, 'e', 'SELECT count(*) FROM ev', '1', $facts);

q_dst(q{
DROP TRIGGER drop_odd ON ev;
CREATE RULE keep_out AS ON INSERT TO ev DO INSTEAD NOTHING;
});
AshTest::start_sink($dst, 'e');
drift_halts(sink => 'e', code => 'append_log_invalid', table => '"public"."ev"',
	what => 'an append log given an ON INSERT rule');
is(q_dst('SELECT count(*) FROM ev'), '1', '... nothing of the transaction committed');

q_dst('DROP RULE keep_out ON ev');
AshTest::start_sink($dst, 'e');
AshTest::wait_caught_up($src, $dst, 'e', name => 'e logs them with the trigger and rule gone');
is(q_dst("SELECT string_agg(id || ':' || operation, ',' ORDER BY id) FROM ev"),
	'1:insert,2:insert,3:insert', 'every event logged once');

# ---------------------------------------------------------------------------
# 4: rules on state-mirror targets
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'r', publication => 'pub_rk', start => 0,
	maps => [], pipeline_extra => $v1);
my %refused = (
	'ON INSERT ... DO ALSO' => 'CREATE RULE r1 AS ON INSERT TO rk DO ALSO NOTIFY rk',
	'ON UPDATE ... DO ALSO' => 'CREATE RULE r1 AS ON UPDATE TO rk DO ALSO NOTIFY rk',
	'ON DELETE ... DO INSTEAD NOTHING' => 'CREATE RULE r1 AS ON DELETE TO rk DO INSTEAD NOTHING',
	'a conditional ON DELETE ... DO INSTEAD' =>
	  'CREATE RULE r1 AS ON DELETE TO rk WHERE OLD.id > 5 DO INSTEAD UPDATE rk SET v = NULL WHERE id = OLD.id',
);
for my $what (sort keys %refused)
{
	q_dst($refused{$what});
	my ($rc, $out, $err) = $dst->psql($DB,
		"SELECT ash_replicant_map_table(sink_name => 'r', target => 'rk'::regclass)");
	isnt($rc, 0, "a state mirror's target with $what rule: refused");
	like($err, qr/mapping rejected: config_invalid \(target "public"\."rk" has rule "r1"/,
		'... config_invalid naming the target and the rule');
	q_dst('DROP RULE r1 ON rk');
}
q_dst(q{
CREATE TABLE rk_gone (id integer, at timestamptz DEFAULT now());
CREATE RULE keep_gone AS ON DELETE TO rk DO ALSO INSERT INTO rk_gone (id) VALUES (OLD.id);
SELECT ash_replicant_map_table(sink_name => 'r', target => 'rk'::regclass);
SELECT ash_replicant_map_table(sink_name => 'r', target => 'ra'::regclass);
SELECT ash_replicant_start('r');
});
is(q_dst("SELECT count(*) FROM ash_replicant.resources WHERE sink_name = 'r' AND target IN ('rk'::regclass, 'ra'::regclass)"), '2',
	'an ON DELETE ... DO ALSO rule is accepted');
AshTest::wait_caught_up($src, $dst, 'r', name => 'r copies and streams')
  or BAIL_OUT('sink r never streamed');
q_src(q{
INSERT INTO rk VALUES (11, 'new');
DELETE FROM rk WHERE id IN (1, 2);
});
AshTest::wait_caught_up($src, $dst, 'r', name => 'r applies inserts and deletes');
AshTest::assert_mirror_equal($src, $dst, ['rk']);
is(q_dst('SELECT string_agg(id::text, \',\' ORDER BY id) FROM rk_gone'), '1,2',
	'the DO ALSO rule ran for each delete');

q_dst('CREATE RULE soft AS ON DELETE TO ra DO INSTEAD UPDATE ra SET v = NULL WHERE id = OLD.id');
$facts = AshTest::checkpoint_facts($dst, 'r');
q_src(q{
BEGIN;
INSERT INTO rk VALUES (12, 'new');
DELETE FROM ra WHERE id = 3;
COMMIT;
});
drift_halts(sink => 'r', code => 'config_invalid', table => '"public"."ra"',
	what => 'a DO INSTEAD rule created after registration');
AshTest::halt_left_nothing($dst, 'r', 'SELECT count(*) FROM rk WHERE id = 12', '0', $facts);
q_dst('DROP RULE soft ON ra');
AshTest::start_sink($dst, 'r');
AshTest::wait_caught_up($src, $dst, 'r', name => 'r applies it with the rule gone');
AshTest::assert_mirror_equal($src, $dst, [ 'rk', 'ra' ]);
is(AshTest::status_row($dst, 'r')->{state}, 'healthy', 'r healthy');

# ---------------------------------------------------------------------------
# 5: a tenant's table under context tenancy
# ---------------------------------------------------------------------------
my $tenant = 'tenant_sentinel_5e1d';
q_src(qq{
CREATE TABLE ct (k text PRIMARY KEY, tenant text NOT NULL, v text);
ALTER TABLE ct REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_ct FOR TABLE ct;
});
q_dst(qq{
CREATE TABLE ct (k text PRIMARY KEY, tenant text NOT NULL, v text);
CREATE SCHEMA t_ok;
CREATE TABLE t_ok.ct (LIKE public.ct INCLUDING ALL);
CREATE SCHEMA $tenant;
CREATE TABLE $tenant.ct (k text COLLATE nocase PRIMARY KEY, tenant text NOT NULL, v text);
});
AshTest::setup_pipeline($src, $dst, sink => 'c', publication => 'pub_ct',
	maps => [ [ 'ct', tenant_column => 'tenant', tenant_strategy => 'context' ] ]);
AshTest::wait_caught_up($src, $dst, 'c', name => 'c streams')
  or BAIL_OUT('sink c never streamed');
q_src(q{INSERT INTO ct VALUES ('a', 't_ok', 'fine')});
AshTest::wait_caught_up($src, $dst, 'c', name => 'c writes the first tenant');
$facts = AshTest::checkpoint_facts($dst, 'c');
q_src(qq{INSERT INTO ct VALUES ('b', 't_ok', 'fine'), ('x', '$tenant', 'lower'), ('X', '$tenant', 'upper')});
AshTest::wait_status($dst, 'c', 'halted', 'census_drift',
	name => "a tenant's table with a nondeterministic key collation: halts census_drift");
ok(scalar(AshTest::log_lines_like($dst,
	qr/event=pipeline\.halt sink=c reason=census_drift .*mapping of public\.ct, a tenant's table: config_invalid\)"/)),
	'... naming the mapping and config_invalid, without the context');
is(scalar(AshTest::log_lines_like($dst, qr/ash_replicant.*\Q$tenant\E/)), 0,
	'... the tenant in no log line of the extension');
AshTest::halt_left_nothing($dst, 'c',
	"SELECT (SELECT count(*) FROM t_ok.ct) || '/' || (SELECT count(*) FROM $tenant.ct)", '1/0', $facts);
q_dst(qq{ALTER TABLE $tenant.ct ALTER COLUMN k TYPE text COLLATE "C"});
AshTest::start_sink($dst, 'c');
AshTest::wait_caught_up($src, $dst, 'c', name => 'c applies it with the collation reverted');
is(q_dst("SELECT string_agg(k, ',' ORDER BY k COLLATE \"C\") FROM (SELECT k FROM t_ok.ct UNION ALL SELECT k FROM $tenant.ct) s"),
	'X,a,b,x', 'every row in its tenant\'s table, X and x apart');

# ---------------------------------------------------------------------------
# 6: two source columns landing on one target column
# ---------------------------------------------------------------------------
q_src(q{
CREATE TABLE two (id integer PRIMARY KEY, a text, b text);
CREATE PUBLICATION pub_two FOR TABLE two;
});
q_dst('CREATE TABLE two (id integer PRIMARY KEY, a text)');
AshTest::setup_pipeline($src, $dst, sink => 't', publication => 'pub_two',
	maps => [ [ 'two', column_map => '{"b": "a"}' ] ]);
AshTest::wait_slot_consistent($src, $dst, 't');
$facts = AshTest::checkpoint_facts($dst, 't');
q_src(q{INSERT INTO two VALUES (1, 'from a', 'from b')});
AshTest::wait_status($dst, 't', 'halted', 'delivery_config_invalid',
	name => 'two source columns on one target column: halts delivery_config_invalid');
ok(scalar(AshTest::log_lines_like($dst,
	qr/event=pipeline\.halt sink=t reason=delivery_config_invalid .*source columns a and b of public\.two both land on column a of public\.two/)),
	'... naming both columns and the target column');
is(q_dst('SELECT count(*) FROM two'), '0', '... nothing written');
is(AshTest::checkpoint_facts($dst, 't'), $facts, '... the checkpoint unchanged');
q_dst(q{SELECT ash_replicant_map_table(sink_name => 't', target => 'two'::regclass,
	column_map => '{"b": "a"}', skip => ARRAY['a'])});
AshTest::start_sink($dst, 't');
AshTest::wait_caught_up($src, $dst, 't', name => 'source column a skipped: t applies it');
is(q_dst('SELECT id || \':\' || a FROM two'), '1:from b', 'the target column holds the renamed column');

# ---------------------------------------------------------------------------
# 7: unlogged targets
# ---------------------------------------------------------------------------
q_src(q{
CREATE TABLE ul (id integer PRIMARY KEY, v text);
INSERT INTO ul SELECT g, 'row ' || g FROM generate_series(1, 20) g;
CREATE PUBLICATION pub_ul FOR TABLE ul;
});
q_dst(q{
CREATE UNLOGGED TABLE ul (id integer PRIMARY KEY, v text);
CREATE TABLE up (id integer PRIMARY KEY, v text) PARTITION BY RANGE (id);
CREATE TABLE up_low PARTITION OF up FOR VALUES FROM (MINVALUE) TO (100);
CREATE UNLOGGED TABLE up_high PARTITION OF up FOR VALUES FROM (100) TO (MAXVALUE);
CREATE EXTENSION postgres_fdw;
CREATE SERVER elsewhere FOREIGN DATA WRAPPER postgres_fdw OPTIONS (dbname 'nowhere');
CREATE TABLE uf (id integer, v text) PARTITION BY RANGE (id);
CREATE TABLE uf_low PARTITION OF uf FOR VALUES FROM (MINVALUE) TO (100);
CREATE FOREIGN TABLE uf_far PARTITION OF uf FOR VALUES FROM (100) TO (MAXVALUE) SERVER elsewhere;
});
AshTest::setup_pipeline($src, $dst, sink => 'g', publication => 'pub_ul', start => 0,
	maps => [], pipeline_extra => $v1);
for my $c ([ 'ul', 'config_invalid', qr/target "public"\."ul" is unlogged/ ],
	[ 'up', 'config_invalid', qr/partition "public"\."up_high" of target "public"\."up" is unlogged/ ],
	[ 'uf', 'destination_not_local', qr/partition "public"\."uf_far" of target "public"\."uf" is a foreign table/ ])
{
	my ($target, $code, $re) = @$c;
	my ($rc, $out, $err) = $dst->psql($DB,
		"SELECT ash_replicant_map_table(sink_name => 'g', target => '$target'::regclass, source_table => 'ul')");
	isnt($rc, 0, "$target refused");
	like($err, qr/mapping rejected: $code \(.*$re/, "... $code: $re");
}
q_dst(q{
ALTER TABLE ul SET LOGGED;
SELECT ash_replicant_map_table(sink_name => 'g', target => 'ul'::regclass);
SELECT ash_replicant_start('g');
});
AshTest::wait_caught_up($src, $dst, 'g', name => 'g copies and streams a logged target')
  or BAIL_OUT('sink g never streamed');
q_dst('ALTER TABLE ul SET UNLOGGED');
$facts = AshTest::checkpoint_facts($dst, 'g');
q_src(q{INSERT INTO ul VALUES (21, 'new')});
drift_halts(sink => 'g', code => 'config_invalid', table => '"public"."ul"',
	what => 'a target set UNLOGGED under a running pipeline');
AshTest::halt_left_nothing($dst, 'g', 'SELECT count(*) FROM ul', '20', $facts);
q_dst('ALTER TABLE ul SET LOGGED');
AshTest::start_sink($dst, 'g');
AshTest::wait_caught_up($src, $dst, 'g', name => 'g applies it with the target logged again');
AshTest::assert_mirror_equal($src, $dst, ['ul']);

# ---------------------------------------------------------------------------
# 8: a state mirror's BEFORE ROW trigger that returns NULL
# ---------------------------------------------------------------------------
# A trigger may keep a write out (return NULL) without an error: the
# previous build took it, healthy, with the rows missing, unchanged or not
# deleted.  A write that affects no row where it must halts
# destination_write_suppressed; a delete of a row the mirror lacks is still
# only counted.
q_src(q{
CREATE TABLE ts (id integer PRIMARY KEY, v text);
INSERT INTO ts SELECT g, 'row ' || g FROM generate_series(1, 4) g;
CREATE PUBLICATION pub_ts FOR TABLE ts;
});
q_dst(q{
CREATE TABLE ts (id integer PRIMARY KEY, v text);
CREATE TABLE keep_out (id integer PRIMARY KEY);
CREATE FUNCTION keep_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM keep_out k WHERE k.id = (CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END)) THEN
		RETURN NULL;
	END IF;
	IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER keep_out BEFORE INSERT OR UPDATE OR DELETE ON ts FOR EACH ROW EXECUTE FUNCTION keep_out();
});
AshTest::setup_pipeline($src, $dst, sink => 'ts', publication => 'pub_ts', maps => [ ['ts'] ],
	pipeline_extra => $v1);
AshTest::wait_caught_up($src, $dst, 'ts', name => 'ts copies and streams')
  or BAIL_OUT('sink ts never streamed');
is(q_dst(q{SELECT verdict || '/' || reason || '/' || detail FROM ash_replicant_doctor('ts')
	WHERE check_name = 'destination_mappings'}), 'warn/target_before_row_trigger/public.ts: keep_out',
	'doctor warns of the BEFORE ROW trigger on the target');
sub suppressed
{
	my ($what, $change, $count_sql, $count) = @_;
	my $facts = AshTest::checkpoint_facts($dst, 'ts');
	q_src($change);
	AshTest::wait_status($dst, 'ts', 'halted', 'destination_write_suppressed',
		name => "$what kept out by a trigger halts destination_write_suppressed");
	ok(scalar(AshTest::log_lines_like($dst,
		qr/event=pipeline\.halt sink=ts reason=destination_write_suppressed .*of a row of public\.ts affected no row/)) >= 1,
		'... the halt names the target');
	AshTest::halt_left_nothing($dst, 'ts', $count_sql, $count, $facts);
	q_dst('TRUNCATE keep_out');
	AshTest::start_sink($dst, 'ts');
	AshTest::wait_caught_up($src, $dst, 'ts', name => "... the trigger lets it through: applied");
	AshTest::assert_mirror_equal($src, $dst, ['ts']);
}
# several rows in one statement (a gathered insert), one of them kept out
q_dst('INSERT INTO keep_out VALUES (6)');
suppressed('an insert', q{INSERT INTO ts SELECT g, 'row ' || g FROM generate_series(5, 8) g},
	'SELECT count(*) FROM ts', '4');
q_dst('INSERT INTO keep_out VALUES (2)');
suppressed('an update', q{UPDATE ts SET v = 'changed' WHERE id = 2},
	"SELECT count(*) FROM ts WHERE v = 'changed'", '0');
q_dst('INSERT INTO keep_out VALUES (3)');
suppressed('a delete', q{DELETE FROM ts WHERE id = 3}, 'SELECT count(*) FROM ts', '8');
# a row the mirror lacks: counted, not a halt
q_dst('ALTER TABLE ts DISABLE TRIGGER keep_out; DELETE FROM ts WHERE id = 4; ALTER TABLE ts ENABLE TRIGGER keep_out');
q_src(q{DELETE FROM ts WHERE id = 4});
AshTest::wait_caught_up($src, $dst, 'ts', name => 'a delete of a row the mirror lacks applies');
is(AshTest::stat_row($dst, 'ts')->{missing_row_deletes}, '1', '... counted as a missing-row delete');
AshTest::wait_status($dst, 'ts', 'healthy', undef, name => '... healthy');

# A target whose every column is its key (its upsert is ON CONFLICT DO
# NOTHING, which counts a row that is there already as none): the previous
# build could not tell a row kept out from one already there, and took it,
# healthy.  Now the rows an upsert did not count are looked for.
q_src(q{
CREATE TABLE tk (a integer, b integer, PRIMARY KEY (a, b));
INSERT INTO tk SELECT g, g FROM generate_series(1, 4) g;
CREATE PUBLICATION pub_tk FOR TABLE tk;
});
q_dst(q{
CREATE TABLE tk (a integer, b integer, PRIMARY KEY (a, b));
CREATE FUNCTION keep_out_k() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM keep_out k WHERE k.id = NEW.a) THEN
		RETURN NULL;
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER keep_out BEFORE INSERT ON tk FOR EACH ROW EXECUTE FUNCTION keep_out_k();
});
AshTest::setup_pipeline($src, $dst, sink => 'tk', publication => 'pub_tk', maps => [ ['tk'] ],
	pipeline_extra => $v1);
AshTest::wait_caught_up($src, $dst, 'tk', name => 'tk (key-only) copies and streams')
  or BAIL_OUT('sink tk never streamed');
for my $c ([ 'one row', 6, q{INSERT INTO tk VALUES (6, 6)}, '4' ],
	[ 'a gathered run', 8, q{INSERT INTO tk SELECT g, g FROM generate_series(7, 10) g}, '5' ])
{
	my ($what, $id, $change, $rows) = @$c;
	q_dst("INSERT INTO keep_out VALUES ($id)");
	my $facts = AshTest::checkpoint_facts($dst, 'tk');
	q_src($change);
	AshTest::wait_status($dst, 'tk', 'halted', 'destination_write_suppressed',
		name => "key-only: $what kept out by a trigger halts destination_write_suppressed");
	AshTest::halt_left_nothing($dst, 'tk', 'SELECT count(*) FROM tk', $rows, $facts);
	q_dst('TRUNCATE keep_out');
	AshTest::start_sink($dst, 'tk');
	AshTest::wait_caught_up($src, $dst, 'tk', name => '... the trigger lets it through: applied');
	AshTest::assert_mirror_equal($src, $dst, ['tk']);
}
# a row there already (the source inserts a key the mirror holds): no halt
q_dst('INSERT INTO tk VALUES (11, 11)');
q_src('INSERT INTO tk VALUES (11, 11)');
AshTest::wait_caught_up($src, $dst, 'tk', name => 'key-only: a row there already is taken');
AshTest::wait_status($dst, 'tk', 'healthy', undef, name => '... healthy');

# SCD2 history: a version opened or closed that a trigger keeps out (the
# previous build: apply_failed XX000 after the retries)
q_src(q{
CREATE TABLE th (id integer PRIMARY KEY, v text);
INSERT INTO th SELECT g, 'row ' || g FROM generate_series(1, 3) g;
CREATE PUBLICATION pub_th FOR TABLE th;
});
q_dst(q{
CREATE TABLE th_hist (vid bigserial PRIMARY KEY, id integer NOT NULL, v text,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint, UNIQUE (id, valid_from_lsn));
CREATE UNIQUE INDEX th_hist_open ON th_hist (id) WHERE valid_to_lsn IS NULL;
CREATE TRIGGER keep_out BEFORE INSERT OR UPDATE OR DELETE ON th_hist FOR EACH ROW EXECUTE FUNCTION keep_out();
});
AshTest::setup_pipeline($src, $dst, sink => 'th', publication => 'pub_th',
	maps => [ [ 'th_hist', source_table => 'th', history_strategy => 'scd2', history_business_key => ['id'] ] ],
	pipeline_extra => $v1);
AshTest::wait_caught_up($src, $dst, 'th', name => 'th copies and streams')
  or BAIL_OUT('sink th never streamed');
my $current = q{SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM };
for my $c ([ 'a version opened', 5, q{INSERT INTO th VALUES (5, 'five')} ],
	[ 'a version closed', 2, q{UPDATE th SET v = 'changed' WHERE id = 2} ])
{
	my ($what, $id, $change) = @$c;
	q_dst("INSERT INTO keep_out VALUES ($id)");
	my $facts = AshTest::checkpoint_facts($dst, 'th');
	q_src($change);
	AshTest::wait_status($dst, 'th', 'halted', 'destination_write_suppressed',
		name => "SCD2: $what kept out by a trigger halts destination_write_suppressed");
	is(AshTest::checkpoint_facts($dst, 'th'), $facts, '... the checkpoint unchanged');
	q_dst('TRUNCATE keep_out');
	AshTest::start_sink($dst, 'th');
	AshTest::wait_caught_up($src, $dst, 'th', name => '... the trigger lets it through: applied');
	is(q_dst($current . 'th_hist WHERE valid_to_lsn IS NULL'), q_src($current . 'th'),
		'... the open versions equal the source');
}

done_testing();
