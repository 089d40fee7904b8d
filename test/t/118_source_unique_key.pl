# A target key the source does not keep unique (docs/operations.md,
# "Replica identity", Keys the source keeps unique): the mirror writes
# every change by the target's identity (an SCD2 mirror by its business
# key), so two source rows with the same values there are one target row
# -- the second write lands on the first and the mirror is one row short,
# `healthy`.  Under REPLICA IDENTITY FULL any source columns could feed
# the target's key; under a narrower replica identity a part of it could.
# (The previous build copied these tables and then merged the rows each
# later transaction below adds, healthy; a v1 copy of rows that already
# repeat the key halted apply_failed 23505 at the index build.)
#
#   1  refused before anything is applied (preflight fails columns with
#      source_key_not_unique; start halts misconfigured with it, naming the
#      table and the key's columns), and nothing of a later transaction
#      that repeats the key lands: no unique index at the source; a target
#      primary key on a part of the source's; only a partial unique index
#      and one with an expression on the column; only a deferrable one (a
#      transaction that swaps two keys passes through a duplicate); an
#      SCD2 business key the source repeats.
#   2  accepted and mirrored: a target key on a source unique index that is
#      not the primary key; a target key wider than the source's; an
#      attribute tenant column completing the source's key.
#   3  the census: the source's unique index dropped under a running
#      pipeline halts source_key_not_unique before the next change lands.
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

# a value planted in every row of a refused table: never in any output
my $SENTINEL = 'sentinel_u118_q7z';

q_src(qq{
CREATE TABLE u_nokey (id integer NOT NULL, v text);
ALTER TABLE u_nokey REPLICA IDENTITY FULL;
INSERT INTO u_nokey VALUES (1, 'a $SENTINEL');
CREATE TABLE u_part (a integer, b integer, v text, PRIMARY KEY (a, b));
INSERT INTO u_part VALUES (1, 1, 'a $SENTINEL');
CREATE TABLE u_weak (id integer NOT NULL, code text NOT NULL, v text);
CREATE UNIQUE INDEX u_weak_partial ON u_weak (id) WHERE id > 0;
CREATE UNIQUE INDEX u_weak_expr ON u_weak (id, lower(code));
ALTER TABLE u_weak REPLICA IDENTITY FULL;
INSERT INTO u_weak VALUES (0, 'x', 'a $SENTINEL');
CREATE TABLE u_defer (id integer NOT NULL, v text,
  CONSTRAINT u_defer_later UNIQUE (id) DEFERRABLE INITIALLY DEFERRED);
ALTER TABLE u_defer REPLICA IDENTITY FULL;
INSERT INTO u_defer VALUES (1, 'a $SENTINEL'), (2, 'b $SENTINEL');
CREATE TABLE u_hist (id integer PRIMARY KEY, code text NOT NULL, v text);
ALTER TABLE u_hist REPLICA IDENTITY FULL;
INSERT INTO u_hist VALUES (1, 'dup', 'a $SENTINEL');
CREATE PUBLICATION pub_nokey FOR TABLE u_nokey;
CREATE PUBLICATION pub_part FOR TABLE u_part;
CREATE PUBLICATION pub_weak FOR TABLE u_weak;
CREATE PUBLICATION pub_defer FOR TABLE u_defer;
CREATE PUBLICATION pub_hist FOR TABLE u_hist;

CREATE TABLE u_email (id integer PRIMARY KEY, email text NOT NULL, v text);
CREATE UNIQUE INDEX u_email_key ON u_email (email);
ALTER TABLE u_email REPLICA IDENTITY FULL;
INSERT INTO u_email SELECT g, 'e' || g, 'v' || g FROM generate_series(1, 20) g;
CREATE TABLE u_wide (id integer PRIMARY KEY, k integer NOT NULL, v text);
ALTER TABLE u_wide REPLICA IDENTITY FULL;
INSERT INTO u_wide SELECT g, g % 3, 'v' || g FROM generate_series(1, 20) g;
CREATE TABLE u_ten (org text, id integer, v text, PRIMARY KEY (org, id));
ALTER TABLE u_ten REPLICA IDENTITY FULL;
INSERT INTO u_ten SELECT CASE WHEN g % 2 = 0 THEN 'acme' ELSE 'zeta' END, g, 'v' || g
  FROM generate_series(1, 20) g;
CREATE PUBLICATION pub_ok FOR TABLE u_email, u_wide, u_ten;
});
q_dst(q{
CREATE TABLE u_nokey (id integer PRIMARY KEY, v text);
CREATE TABLE u_part (a integer PRIMARY KEY, b integer, v text);
CREATE TABLE u_weak (id integer PRIMARY KEY, code text NOT NULL, v text);
CREATE TABLE u_defer (id integer PRIMARY KEY, v text);
CREATE TABLE u_hist (vid bigserial PRIMARY KEY, id integer NOT NULL, code text NOT NULL,
  v text, valid_from_lsn bigint NOT NULL, valid_to_lsn bigint,
  UNIQUE (code, valid_from_lsn));
CREATE UNIQUE INDEX u_hist_open ON u_hist (code) WHERE valid_to_lsn IS NULL;
CREATE TABLE u_email (id integer NOT NULL, email text PRIMARY KEY, v text);
CREATE TABLE u_wide (id integer, k integer, v text, PRIMARY KEY (id, k));
CREATE TABLE u_ten (org text NOT NULL, id integer PRIMARY KEY, v text);
});

my $snap = "go_forward_only => false, snapshot => 'v1'";

# ---------------------------------------------------------------------------
# 1: refused, nothing applied
# ---------------------------------------------------------------------------
for my $c (
	[ 'nokey', 'u_nokey', [], qr/table public\.u_nokey: .*\(id\)/,
		"INSERT INTO u_nokey VALUES (1, 'b $SENTINEL')" ],
	[ 'part',  'u_part',  [], qr/table public\.u_part: .*\(a\)/,
		"INSERT INTO u_part VALUES (1, 2, 'b $SENTINEL')" ],
	[ 'weak',  'u_weak',  [], qr/table public\.u_weak: .*\(id\)/,
		"INSERT INTO u_weak VALUES (0, 'y', 'b $SENTINEL')" ],
	[ 'defer', 'u_defer', [], qr/table public\.u_defer: .*\(id\)/,
		"UPDATE u_defer SET id = 3 - id" ],
	[ 'hist',  'u_hist',
		[ history_strategy => 'scd2', history_business_key => ['code'] ],
		qr/table public\.u_hist: .*\(code\)/,
		"INSERT INTO u_hist VALUES (2, 'dup', 'b $SENTINEL')" ])
{
	my ($sink, $table, $opts, $names, $later) = @$c;
	AshTest::setup_pipeline($src, $dst, sink => $sink, publication => "pub_$sink", start => 0,
		maps => [ [ $table, @$opts ] ], pipeline_extra => $snap);
	my $pf = q_dst("SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_preflight('$sink')"
		  . " WHERE check_name = 'columns'");
	is($pf, 'fail/source_key_not_unique', "$table: preflight fails columns with source_key_not_unique");
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'misconfigured', 'source_key_not_unique',
		name => "$table: start halts source_key_not_unique");
	q_src($later);
	is(q_dst("SELECT count(*) FROM $table"), '0', "$table: nothing applied");
	ok(AshTest::log_lines_like($dst,
			qr/event=pipeline\.halt sink=$sink reason=source_key_not_unique .*$names/) >= 1,
		"$table: the halt names the table and the target key's source columns");
}

# ---------------------------------------------------------------------------
# 2: keys the source keeps apart
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'ok', publication => 'pub_ok',
	maps => [ [ 'u_email' ], [ 'u_wide' ],
		[ 'u_ten', tenant_column => 'org', tenant_strategy => 'attribute' ] ],
	pipeline_extra => $snap);
AshTest::wait_caught_up($src, $dst, 'ok', name => 'accepted keys: copies and streams')
  or BAIL_OUT('sink ok never streamed');
q_src(q{
UPDATE u_email SET v = 'changed' WHERE id <= 5;
UPDATE u_email SET email = 'moved' WHERE id = 6;
DELETE FROM u_email WHERE id > 15;
UPDATE u_wide SET k = k + 10 WHERE id <= 4;
DELETE FROM u_wide WHERE id > 17;
UPDATE u_ten SET v = 'changed' WHERE id <= 6;
DELETE FROM u_ten WHERE id > 18;
});
AshTest::wait_caught_up($src, $dst, 'ok', name => 'accepted keys stream');
AshTest::assert_mirror_equal($src, $dst, [ 'u_email', 'u_wide', 'u_ten' ]);
is(q_dst("SELECT verdict FROM ash_replicant_preflight('ok') WHERE check_name = 'columns'"),
	'pass', 'accepted keys: preflight passes columns');

# ---------------------------------------------------------------------------
# 3: the census finds the unique index gone
# ---------------------------------------------------------------------------
q_src("DROP INDEX u_email_key");
AshTest::wait_status($dst, 'ok', 'misconfigured', 'source_key_not_unique',
	name => 'census: the dropped unique index halts source_key_not_unique');
q_src("INSERT INTO u_email VALUES (100, 'e1', 'second e1')");
is(q_dst("SELECT count(*) FROM u_email WHERE id = 100"), '0',
	'census: nothing of the later change applied');

# every log line and output value-free
my @leak = grep { /$SENTINEL/ } AshTest::log_lines_like($dst, qr/./);
is(scalar(@leak), 0, 'no row value in the destination server log');

done_testing();
