# Every tenant halt leaves mirror and checkpoint unchanged (docs/sql-api-mapping.md, README.md#how-apply-works,
# README.md#reason-codes); the operator fixes the cause and ash_replicant_start resumes exactly.
#
# Sink "th" (one pipeline, one halt after the other; each failing source
# transaction also writes valid rows, and a valid transaction follows it):
#   R1 tenant_scope_missing   context tenant whose schema does not exist
#                             (fix: create schema and table)
#   R2 tenant_scope_missing   schema exists, the table does not (fix: create it)
#   R3 tenant_scope_missing   tenant table with a column of another type
#                             (fix: alter the column type)
#   R4 tenant_scope_missing   relocation into a missing tenant schema: the row
#                             stays with its old tenant (fix: create the schema)
#   R5 tenant_resolution_failed  the tenant function raises (fix: replace it)
#   R6 tenant_required        the tenant function returns NULL, side=new
#                             (fix: replace the function)
#   R7 tenant_conflict        attribute insert meets another tenant's row under
#                             the same key (fix: tenant joins the target key)
#   R8 tenant_conflict        attribute update of a row the mirror lacks whose
#                             key is held by another tenant (same fix)
#   R9 tenant_scope_missing   a tenant table the running worker has already
#                             written to is renamed away: nothing is written
#                             to it under its new name (fix: rename it back)
#
# Terminal sinks (no fix is possible, the source transaction is immutable):
# the halt, nothing applied, and a restart without a fix halts the same way.
#   tn_null   NULL tenant (side=new)          tn_blank  blank tenant (side=new)
#   tn_false  boolean false tenant (side=new) tn_old    NULL old tenant (side=old)
#   tn_long   context tenant longer than a schema name whose first 63 bytes
#             name an existing tenant schema: must not be written there
#   tn_rid    tenant-scoped source without REPLICA IDENTITY FULL:
#             misconfigured/source_replica_identity
#   tn_pair   one source statement inserts the same destination key under two
#             tenants (consecutive inserts may be written as one multi-row
#             upsert): tenant_conflict, not a cardinality error
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use AshTenancy;
use PostgreSQL::Test::Utils;
use Test::More;

my ($src, $dst) = AshTest::start_pair();
my $sink = 'th';
my $long63 = 'a' x 63;
my $long64 = $long63 . 'b';

##############################################################################
# Schema
##############################################################################

$src->safe_psql('postgres', q{
CREATE TABLE acct (tenant text NOT NULL, id integer NOT NULL, note text, PRIMARY KEY (tenant, id));
CREATE TABLE ledger (tenant text NOT NULL, id integer NOT NULL, note text, PRIMARY KEY (tenant, id));
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text);
CREATE TABLE ev (id integer PRIMARY KEY, org text, kind text);
CREATE TABLE tnull (id integer PRIMARY KEY, tenant text, v text);
CREATE TABLE tblank (id integer PRIMARY KEY, tenant text, v text);
CREATE TABLE tfalse (id integer PRIMARY KEY, tenant boolean, v text);
CREATE TABLE told (id integer PRIMARY KEY, tenant text, v text);
CREATE TABLE tlong (id integer PRIMARY KEY, tenant text, v text);
CREATE TABLE trid (id integer PRIMARY KEY, tenant text, v text);
CREATE TABLE tpair (tenant text NOT NULL, id integer NOT NULL, v text, PRIMARY KEY (tenant, id));
ALTER TABLE tpair REPLICA IDENTITY FULL;
ALTER TABLE acct REPLICA IDENTITY FULL;
ALTER TABLE ledger REPLICA IDENTITY FULL;
ALTER TABLE docs REPLICA IDENTITY FULL;
ALTER TABLE ev REPLICA IDENTITY FULL;
ALTER TABLE tnull REPLICA IDENTITY FULL;
ALTER TABLE tblank REPLICA IDENTITY FULL;
ALTER TABLE tfalse REPLICA IDENTITY FULL;
ALTER TABLE told REPLICA IDENTITY FULL;
ALTER TABLE tlong REPLICA IDENTITY FULL;
-- trid keeps REPLICA IDENTITY DEFAULT
CREATE PUBLICATION pub_th FOR TABLE acct, ledger, docs, ev;
CREATE PUBLICATION pub_tn_null FOR TABLE tnull;
CREATE PUBLICATION pub_tn_blank FOR TABLE tblank;
CREATE PUBLICATION pub_tn_false FOR TABLE tfalse;
CREATE PUBLICATION pub_tn_old FOR TABLE told;
CREATE PUBLICATION pub_tn_long FOR TABLE tlong;
CREATE PUBLICATION pub_tn_rid FOR TABLE trid;
CREATE PUBLICATION pub_tn_pair FOR TABLE tpair;
-- committed before any slot: the go-forward mirrors never see these
INSERT INTO ledger VALUES ('globex', 52, 'pre-slot globex 52');
INSERT INTO told VALUES (9, NULL, 'legacy row without a tenant');
});

$dst->safe_psql('postgres', qq{
CREATE TABLE acct (tenant text NOT NULL, id integer PRIMARY KEY, note text);
CREATE TABLE ledger (tenant text NOT NULL, id integer PRIMARY KEY, note text);
CREATE TABLE docs (id integer PRIMARY KEY, tenant text, title text);
CREATE SCHEMA acme;
CREATE TABLE acme.docs (LIKE public.docs INCLUDING ALL);
CREATE SCHEMA hollow;                                   -- no docs table
CREATE SCHEMA skew;
CREATE TABLE skew.docs (id integer PRIMARY KEY, tenant text, title integer);

CREATE TABLE ev (id integer PRIMARY KEY, org text, kind text);
CREATE SCHEMA ev_acme;
CREATE SCHEMA ev_globex;
CREATE TABLE ev_acme.ev (LIKE public.ev INCLUDING ALL);
CREATE TABLE ev_globex.ev (LIKE public.ev INCLUDING ALL);
CREATE FUNCTION ev_tenant(r jsonb) RETURNS text LANGUAGE plpgsql IMMUTABLE AS \$\$
BEGIN
	IF r->>'org' = 'boom' THEN
		RAISE EXCEPTION 'cannot resolve a tenant';
	END IF;
	RETURN lower(r->>'org');
END \$\$;

CREATE TABLE tnull (id integer PRIMARY KEY, tenant text, v text);
CREATE TABLE tblank (id integer PRIMARY KEY, tenant text, v text);
CREATE TABLE tfalse (id integer PRIMARY KEY, tenant boolean, v text);
CREATE TABLE told (id integer PRIMARY KEY, tenant text, v text);
CREATE TABLE tlong (id integer PRIMARY KEY, tenant text, v text);
CREATE SCHEMA "$long63";
CREATE TABLE "$long63".tlong (LIKE public.tlong INCLUDING ALL);
CREATE TABLE trid (id integer PRIMARY KEY, tenant text, v text);
CREATE TABLE tpair (tenant text NOT NULL, id integer PRIMARY KEY, v text);
});

my @attr = (tenant_column => 'tenant', tenant_strategy => 'attribute');
my @ctx  = (tenant_column => 'tenant', tenant_strategy => 'context');
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_th',
	maps => [
		[ 'acct', @attr ],
		[ 'ledger', @attr ],
		[ 'docs', @ctx ],
		[ 'ev', tenant_function => 'ev_tenant(jsonb)', tenant_strategy => 'context',
			tenant_schema_format => 'ev_%s' ] ]);
my %terminal = (
	tn_null  => [ 'tnull', @attr ],
	tn_blank => [ 'tblank', @attr ],
	tn_false => [ 'tfalse', @attr ],
	tn_old   => [ 'told', @attr ],
	tn_long  => [ 'tlong', @ctx ],
	tn_rid   => [ 'trid', @attr ],
	tn_pair  => [ 'tpair', @attr ]);
for my $s (sort keys %terminal)
{
	AshTest::setup_pipeline($src, $dst, sink => $s, publication => "pub_$s", maps => [ $terminal{$s} ]);
}
for my $s ($sink, grep { $_ ne 'tn_rid' } sort keys %terminal)
{
	AshTest::wait_caught_up($src, $dst, $s, name => "$s streams") or BAIL_OUT("$s never streamed");
}
# coverage at activation (SPEC 7.2): refused before anything is bound
AshTest::wait_status($dst, 'tn_rid', 'misconfigured', 'source_replica_identity', src => $src,
	name => 'tn_rid refused at activation');

##############################################################################
# Sink "th": halt, unchanged, fix, resume, converge
##############################################################################

# README.md#how-apply-works, README.md#reason-codes: tenant_required is reported with side=new|old (structure,
# not a value).  Any log line of the sink that names tenant_required counts,
# together with its DETAIL line (the halt event or an event of its own).
sub side_logged
{
	my ($s, $side, $label) = @_;
	my @found;
	for my $f (AshTest::log_files($dst))
	{
		my @l = split /\n/, slurp_file($f);
		for my $i (0 .. $#l)
		{
			next unless $l[$i] =~ /ash_replicant .*\bsink=\Q$s\E(\s|$)/ && $l[$i] =~ /tenant[._]required/;
			my $text = $l[$i];
			$text .= "\n" . $l[ $i + 1 ] if $i < $#l && $l[ $i + 1 ] =~ /\bDETAIL:/;
			push @found, $text;
		}
	}
	ok(scalar(grep { /\bside=\Q$side\E\b/ } @found) >= 1, "$label: the tenant_required halt names side=$side")
	  or diag join("\n", @found);
}

# destination tables whose content a halt must not change (grows as the
# fixes create tenant tables)
my @th_tables = qw(acct ledger acme.docs skew.docs ev_acme.ev ev_globex.ev);

# round(label, reason, bad => sql, later => sql, fix => sql, check => sub, side => 'new')
sub round
{
	my (%r) = @_;
	my $label = $r{label};
	$dst->safe_psql('postgres', $r{before_bad}) if $r{before_bad};
	my @tables = map { $_ eq 'newco.docs' && $r{before_bad} ? 'newco.docs_elsewhere' : $_ } @th_tables;
	my $before = AshTenancy::state($dst, $sink, @tables);
	my $events0 = scalar(AshTenancy::halt_events($dst, $sink, $r{reason}));

	$src->safe_psql('postgres', $r{bad});
	$src->safe_psql('postgres', $r{later});
	AshTenancy::expect_halt($src, $dst, $sink, $r{reason}, $before, label => $label);
	my @ev = AshTenancy::halt_events($dst, $sink, $r{reason});
	cmp_ok(scalar(@ev), '>', $events0, "$label: the halt is logged as an event with its reason");
	side_logged($sink, $r{side}, $label) if $r{side};
	$r{after_halt}->() if $r{after_halt};

	$dst->safe_psql('postgres', $r{fix});
	AshTest::start_sink($dst, $sink);
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: resumed after the fix");
	$r{check}->();
	is((AshTest::checkpoint_row($dst, $sink) // {})->{terminal_cause}, undef,
		"$label: tombstone cleared by the next checkpoint write");
}

sub docs_of
{
	my ($tenant, $label) = @_;
	AshTenancy::assert_same($src, 'docs', "tenant = " . AshTest::lit($tenant), $dst,
		qq{"$tenant".docs}, "$label: docs of $tenant");
}

round(
	label  => 'R1 schema missing',
	reason => 'tenant_scope_missing',
	bad    => q{
BEGIN;
INSERT INTO docs VALUES (1, 'acme', 'acme one');
INSERT INTO acct VALUES ('acme', 1, 'acme one');
INSERT INTO docs VALUES (2, 'newco', 'newco two');
INSERT INTO docs VALUES (3, 'acme', 'acme three');
COMMIT;},
	later => q{INSERT INTO docs VALUES (4, 'acme', 'later')},
	fix   => q{CREATE SCHEMA newco; CREATE TABLE newco.docs (LIKE public.docs INCLUDING ALL);},
	check => sub {
		docs_of($_, 'R1') for qw(acme newco);
		AshTenancy::assert_same($src, 'acct', undef, $dst, 'acct', 'R1: acct');
	});
push @th_tables, 'newco.docs';

round(
	label  => 'R2 table missing',
	reason => 'tenant_scope_missing',
	bad    => q{
BEGIN;
INSERT INTO acct VALUES ('acme', 2, 'acme two');
INSERT INTO docs VALUES (5, 'hollow', 'hollow five');
COMMIT;},
	later => q{INSERT INTO acct VALUES ('globex', 3, 'later')},
	fix   => q{CREATE TABLE hollow.docs (LIKE public.docs INCLUDING ALL)},
	check => sub {
		docs_of('hollow', 'R2');
		AshTenancy::assert_same($src, 'acct', undef, $dst, 'acct', 'R2: acct');
	});
push @th_tables, 'hollow.docs';

round(
	label  => 'R3 column type differs',
	reason => 'tenant_scope_missing',
	bad    => q{
BEGIN;
INSERT INTO docs VALUES (6, 'acme', 'acme six');
INSERT INTO docs VALUES (7, 'skew', '7');
COMMIT;},
	later => q{INSERT INTO docs VALUES (8, 'newco', 'later')},
	fix   => q{ALTER TABLE skew.docs ALTER COLUMN title TYPE text},
	check => sub { docs_of($_, 'R3') for qw(acme skew newco); });

round(
	label  => 'R4 relocation into a missing schema',
	reason => 'tenant_scope_missing',
	bad    => q{
BEGIN;
UPDATE docs SET title = 'edited' WHERE id = 3;
UPDATE docs SET tenant = 'nowhere' WHERE id = 1;
COMMIT;},
	later => q{UPDATE docs SET title = 'later' WHERE id = 6},
	after_halt => sub {
		is($dst->safe_psql('postgres', q{SELECT title FROM acme.docs WHERE id = 1}), 'acme one',
			'R4: the row stays with its old tenant');
	},
	fix   => q{CREATE SCHEMA nowhere; CREATE TABLE nowhere.docs (LIKE public.docs INCLUDING ALL);},
	check => sub { docs_of($_, 'R4') for qw(acme nowhere); });
push @th_tables, 'nowhere.docs';

my $ev_src_tenant = q{CASE WHEN org = 'boom' THEN 'globex' ELSE lower(coalesce(org, 'acme')) END};
round(
	label  => 'R5 tenant function raises',
	reason => 'tenant_resolution_failed',
	bad    => q{
BEGIN;
INSERT INTO ev VALUES (1, 'Acme', 'fine');
INSERT INTO ev VALUES (2, 'boom', 'explodes');
COMMIT;},
	later => q{INSERT INTO ev VALUES (3, 'GLOBEX', 'later')},
	fix   => q{CREATE OR REPLACE FUNCTION ev_tenant(r jsonb) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF r->>'org' = 'boom' THEN
		RETURN 'globex';
	END IF;
	RETURN lower(r->>'org');
END $$},
	check => sub {
		for my $t (qw(acme globex))
		{
			AshTenancy::assert_same($src, 'ev', "$ev_src_tenant = '$t'", $dst, "ev_$t.ev", "R5: ev of $t");
		}
	});

round(
	label  => 'R6 tenant function returns NULL',
	reason => 'tenant_required',
	side   => 'new',
	bad    => q{
BEGIN;
INSERT INTO ev VALUES (4, 'globex', 'fine');
INSERT INTO ev VALUES (5, NULL, 'orphan');
COMMIT;},
	later => q{INSERT INTO ev VALUES (6, 'acme', 'later')},
	fix   => q{CREATE OR REPLACE FUNCTION ev_tenant(r jsonb) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
	IF r->>'org' = 'boom' THEN
		RETURN 'globex';
	END IF;
	RETURN lower(coalesce(r->>'org', 'acme'));
END $$},
	check => sub {
		for my $t (qw(acme globex))
		{
			AshTenancy::assert_same($src, 'ev', "$ev_src_tenant = '$t'", $dst, "ev_$t.ev", "R6: ev of $t");
		}
	});

round(
	label  => 'R7 upsert meets another tenant',
	reason => 'tenant_conflict',
	bad    => q{
BEGIN;
INSERT INTO acct VALUES ('globex', 10, 'globex ten');
INSERT INTO acct VALUES ('globex', 1, 'globex one');   -- acme holds id 1
COMMIT;},
	later => q{INSERT INTO acct VALUES ('initech', 11, 'later')},
	after_halt => sub {
		is($dst->safe_psql('postgres', q{SELECT tenant || ' ' || note FROM acct WHERE id = 1}), 'acme acme one',
			'R7: the other tenant\'s row is not overwritten');
	},
	fix   => q{ALTER TABLE acct DROP CONSTRAINT acct_pkey, ADD PRIMARY KEY (tenant, id)},
	check => sub {
		AshTenancy::assert_same($src, 'acct', undef, $dst, 'acct', 'R7: acct', order_by => 'tenant, id');
	});

# R8: acme 52 is mirrored; globex 52 exists at the source only (pre-slot)
$src->safe_psql('postgres', q{INSERT INTO ledger VALUES ('acme', 52, 'acme 52')});
AshTest::wait_caught_up($src, $dst, $sink);
round(
	label  => 'R8 update of an unseen row meets another tenant',
	reason => 'tenant_conflict',
	bad    => q{
BEGIN;
INSERT INTO ledger VALUES ('acme', 53, 'acme 53');
UPDATE ledger SET note = 'globex 52 edited' WHERE tenant = 'globex' AND id = 52;
COMMIT;},
	later => q{INSERT INTO ledger VALUES ('acme', 54, 'later')},
	after_halt => sub {
		is($dst->safe_psql('postgres', q{SELECT tenant || ' ' || note FROM ledger WHERE id = 52}), 'acme acme 52',
			'R8: the other tenant\'s row is not overwritten');
	},
	fix   => q{ALTER TABLE ledger DROP CONSTRAINT ledger_pkey, ADD PRIMARY KEY (tenant, id)},
	check => sub {
		AshTenancy::assert_same($src, 'ledger', undef, $dst, 'ledger', 'R8: ledger', order_by => 'tenant, id');
	});

# R9: a tenant table the running worker already writes to is renamed away
$src->safe_psql('postgres', q{INSERT INTO docs VALUES (20, 'newco', 'newco twenty')});
AshTest::wait_caught_up($src, $dst, $sink);
round(
	label  => 'R9 cached tenant table renamed away',
	reason => 'tenant_scope_missing',
	bad    => q{
BEGIN;
INSERT INTO docs VALUES (21, 'acme', 'acme 21');
INSERT INTO docs VALUES (22, 'newco', 'newco 22');
COMMIT;},
	later  => q{INSERT INTO docs VALUES (23, 'acme', 'later')},
	before_bad => q{ALTER TABLE newco.docs RENAME TO docs_elsewhere},
	after_halt => sub {
		is($dst->safe_psql('postgres', q{SELECT count(*) FROM newco.docs_elsewhere WHERE id = 22}), '0',
			'R9: nothing written to the renamed table');
	},
	fix    => q{ALTER TABLE newco.docs_elsewhere RENAME TO docs},
	check  => sub { docs_of($_, 'R9') for qw(acme newco); });

AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => 'th healthy after all rounds');

##############################################################################
# Terminal sinks
##############################################################################

my %bad = (
	tn_null  => [ q{BEGIN; INSERT INTO tnull VALUES (1, 'acme', 'ok'), (2, NULL, 'no tenant'); COMMIT;},
		q{INSERT INTO tnull VALUES (3, 'acme', 'later')}, 'tenant_required', 'new' ],
	tn_blank => [ qq{BEGIN; INSERT INTO tblank VALUES (1, 'acme', 'ok'); INSERT INTO tblank VALUES (2, E' \\t ', 'blank'); COMMIT;},
		q{INSERT INTO tblank VALUES (3, 'acme', 'later')}, 'tenant_required', 'new' ],
	tn_false => [ q{BEGIN; INSERT INTO tfalse VALUES (1, true, 'ok'), (2, false, 'false tenant'); COMMIT;},
		q{INSERT INTO tfalse VALUES (3, true, 'later')}, 'tenant_required', 'new' ],
	tn_old   => [ q{BEGIN; INSERT INTO told VALUES (1, 'acme', 'ok'); UPDATE told SET tenant = 'acme' WHERE id = 9; COMMIT;},
		q{INSERT INTO told VALUES (3, 'acme', 'later')}, 'tenant_required', 'old' ],
	tn_long  => [ qq{BEGIN; INSERT INTO tlong VALUES (1, '$long63', 'ok'); INSERT INTO tlong VALUES (2, '$long64', 'another tenant'); COMMIT;},
		qq{INSERT INTO tlong VALUES (3, '$long63', 'later')}, 'tenant_scope_missing' ],
	tn_rid   => [ q{BEGIN; INSERT INTO trid VALUES (1, 'acme', 'ok'); COMMIT;},
		q{INSERT INTO trid VALUES (2, 'acme', 'later')}, 'source_replica_identity', undef, 'misconfigured' ],
	tn_pair  => [ q{INSERT INTO tpair VALUES ('acme', 1, 'ok'), ('acme', 5, 'acme five'), ('globex', 5, 'globex five'), ('acme', 6, 'ok')},
		q{INSERT INTO tpair VALUES ('acme', 7, 'later')}, 'tenant_conflict' ]);
my %tbl = (tn_null => 'tnull', tn_blank => 'tblank', tn_false => 'tfalse', tn_old => 'told',
	tn_long => 'tlong', tn_rid => 'trid', tn_pair => 'tpair');

my %before;
for my $s (sort keys %bad)
{
	my @tables = ($tbl{$s});
	push @tables, qq{"$long63".tlong} if $s eq 'tn_long';
	$before{$s} = AshTenancy::state($dst, $s, @tables);
}
for my $s (sort keys %bad)
{
	$src->safe_psql('postgres', $bad{$s}[0]);
	$src->safe_psql('postgres', $bad{$s}[1]);
}
for my $s (sort keys %bad)
{
	my (undef, undef, $reason, $side, $state) = @{ $bad{$s} };
	AshTenancy::expect_halt($src, $dst, $s, $reason, $before{$s}, state => $state, label => $s);
	side_logged($s, $side, $s) if $side;
}
is($dst->safe_psql('postgres', qq{SELECT count(*) FROM "$long63".tlong}), '0',
	'tn_long: nothing written to the tenant whose name is a prefix of the row\'s tenant');
for my $s (sort keys %bad)
{
	my (undef, undef, $reason, undef, $state) = @{ $bad{$s} };
	AshTenancy::restart_and_expect_halt($src, $dst, $s, $reason, $before{$s}, state => $state, label => $s);
}

done_testing();
