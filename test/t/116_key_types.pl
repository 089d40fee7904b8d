# Key columns keep the source's keys apart (docs/operations.md, "Type
# compatibility", Key columns): a target key column whose type compares
# coarser than the source's makes two source rows one target row -- text
# into citext ('A' and 'a'), numeric into double precision (0.1 and
# 0.1000000000000000001) -- and the second row's write lands on the
# first's without a word.  (The previous build copied them: v1's index
# build after the rows halted apply_failed 23505 on the two keys, the
# stream would have merged them, and the tenants shared one scope.)
#
#   1  a citext key (SCD1 identity), a double precision key and a citext
#      tenant column (attribute tenancy): preflight fails columns
#      source_type_invalid naming the column and both types; start halts
#      source_type_invalid before anything is applied.
#   2  widenings that keep every key apart (integer into bigint, text into
#      varchar) and a user type into itself (citext into citext) are
#      accepted and mirror every row.
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

q_src(q{
CREATE TABLE k_ci (email text PRIMARY KEY, v text);
INSERT INTO k_ci VALUES ('ann@example.com', 'lower'), ('Ann@example.com', 'upper');
CREATE TABLE k_num (id numeric PRIMARY KEY, v text);
INSERT INTO k_num VALUES (0.1, 'short'), (0.1000000000000000001, 'long');
CREATE TABLE k_ten (id integer PRIMARY KEY, org text NOT NULL, v text);
ALTER TABLE k_ten REPLICA IDENTITY FULL;
INSERT INTO k_ten VALUES (1, 'acme', 'a'), (2, 'ACME', 'b');
CREATE TABLE k_wide (id integer PRIMARY KEY, code text NOT NULL UNIQUE, v text);
INSERT INTO k_wide SELECT g, 'c' || g, 'w' || g FROM generate_series(1, 20) g;
CREATE PUBLICATION pub_ci FOR TABLE k_ci;
CREATE PUBLICATION pub_num FOR TABLE k_num;
CREATE PUBLICATION pub_ten FOR TABLE k_ten;
CREATE EXTENSION citext;
CREATE TABLE k_cit (email citext PRIMARY KEY, v text);
INSERT INTO k_cit VALUES ('ann@example.com', 'one'), ('bob@example.com', 'two');
CREATE PUBLICATION pub_wide FOR TABLE k_wide, k_cit;
});
q_dst(q{
CREATE EXTENSION citext;
CREATE TABLE k_ci (email citext PRIMARY KEY, v text);
CREATE TABLE k_num (id double precision PRIMARY KEY, v text);
CREATE TABLE k_ten (id integer PRIMARY KEY, org citext NOT NULL, v text);
CREATE TABLE k_wide (id bigint PRIMARY KEY, code varchar(20) NOT NULL, v text);
CREATE TABLE k_cit (email citext PRIMARY KEY, v text);
});

my $snap = "go_forward_only => false, snapshot => 'v1'";

# ---------------------------------------------------------------------------
# 1: refused, nothing applied
# ---------------------------------------------------------------------------
for my $c (
	[ 'ci',  'k_ci',  [], qr/email \(text -> citext\)/ ],
	[ 'num', 'k_num', [], qr/id \(numeric -> double precision\)/ ],
	[ 'ten', 'k_ten', [ tenant_column => 'org', tenant_strategy => 'attribute' ], qr/org \(text -> citext\)/ ])
{
	my ($sink, $table, $opts, $names) = @$c;
	AshTest::setup_pipeline($src, $dst, sink => $sink, publication => "pub_$sink", start => 0,
		maps => [ [ $table, @$opts ] ], pipeline_extra => $snap);
	my $pf = q_dst("SELECT verdict || '/' || coalesce(reason, '') FROM ash_replicant_preflight('$sink')"
		  . " WHERE check_name = 'columns'");
	is($pf, 'fail/source_type_invalid', "$table: preflight fails columns with source_type_invalid");
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'misconfigured', 'source_type_invalid',
		name => "$table: start halts source_type_invalid");
	is(q_dst("SELECT count(*) FROM $table"), '0', "$table: nothing applied");
	ok(AshTest::log_lines_like($dst,
			qr/event=pipeline\.halt sink=$sink reason=source_type_invalid .*key columns .*$names/) >= 1,
		"$table: the halt names the key column and both types");
}

# ---------------------------------------------------------------------------
# 2: widenings that keep keys apart
# ---------------------------------------------------------------------------
AshTest::setup_pipeline($src, $dst, sink => 'wide', publication => 'pub_wide',
	maps => [ [ 'k_wide' ], [ 'k_cit' ] ], pipeline_extra => $snap);
AshTest::wait_caught_up($src, $dst, 'wide', name => 'integer into bigint: copies and streams')
  or BAIL_OUT('sink wide never streamed');
q_src("UPDATE k_wide SET v = 'changed' WHERE id <= 5; DELETE FROM k_wide WHERE id > 15");
AshTest::wait_caught_up($src, $dst, 'wide', name => 'wide streams');
AshTest::assert_mirror_equal($src, $dst, [ 'k_wide', 'k_cit' ]);

# every log line and output value-free: no key value of the refused tables
my @leak = grep { /ann\@example|0\.1000000000000000001|ACME/i }
  AshTest::log_lines_like($dst, qr/ash_replicant/);
is(scalar(@leak), 0, 'no key value in the extension\'s log lines');

done_testing();
