# Source coverage judged by the worker exactly as preflight judges it, at
# activation and in every census (README.md#how-apply-works, README.md#status-statistics-and-events "Probe identity").
#
# One sink (cv, census every 500 ms) over a publication of mapped tables plus
# one ignored table.  Each coverage reason is triggered by a real source
# change twice:
#
#  - at activation: the change is made while the pipeline is stopped, with a
#    covered change (a row of "base") behind it; ash_replicant_start ends
#    misconfigured with the reason, preflight fails with the same reason,
#    nothing is applied and the checkpoint (watermark, end, timeline,
#    contract fingerprint) is untouched;
#  - while streaming: the census halts with the reason before any row of the
#    changed table arrives, the checkpoint untouched.
#
#  table added to the publication       source_table_unmapped    map it
#  column added to a source table       source_column_unmapped   add it to the target,
#    (then source_column_added: the target holds rows)           acknowledge it
#  column type changed                  source_type_invalid      skip it
#  replica identity of a tenant-scoped  source_replica_identity  REPLICA IDENTITY FULL
#    table no longer FULL
#  a skipped column dropped             source_column_missing    on_schema_change ignore
#  publication dropped                  source_publication_missing  recreate it
#
# After each fix ash_replicant_start returns the sink to healthy and the
# mirror equals the source (skipped columns left out of the comparison); a
# re-created publication first halts publication_gap, acknowledged.  A
# mapped and an ignored table leaving the table set only warn
# (coverage.warning events mapping_never_matches / ignore_never_matches)
# and the pipeline streams on; once the mapped one is back, publication_gap.
#
# A second sink (cu) connects as a role limited to one connection, so its
# replication connection works and its probe connection is refused: the
# activation verdict is deferred (source.fault step=coverage, reconnecting;
# no checkpoint row, no slot) until the probe gets through; later census
# probes refused in a row halt census_unverifiable.  The census keeps its
# connection between runs, and opens it again when the source ended it.
use strict;
use warnings;
use lib 'test/t';
use AshTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $DB = 'postgres';
my ($src, $dst) = AshTest::start_pair(log_statement => 'none');
my $sink = 'cv';

my $ddl = q{
CREATE TABLE base (id integer PRIMARY KEY, v text);
CREATE TABLE ten (id integer PRIMARY KEY, tenant text NOT NULL, v text);
CREATE TABLE typ (id integer PRIMARY KEY, n integer, m integer, v text);
CREATE TABLE extra1 (id integer PRIMARY KEY, v text);
CREATE TABLE extra2 (id integer PRIMARY KEY, v text);
};
AshTest::both($src, $dst, $ddl);
$src->safe_psql($DB, q{
CREATE TABLE sk1 (id integer PRIMARY KEY, v text, junk text);
CREATE TABLE sk2 (id integer PRIMARY KEY, v text, junk text);
CREATE TABLE ign (id integer PRIMARY KEY, v text);
ALTER TABLE ten REPLICA IDENTITY FULL;
CREATE PUBLICATION pub_cv FOR TABLE base, ten, typ, sk1, sk2, ign;
});
$dst->safe_psql($DB, q{
CREATE TABLE sk1 (id integer PRIMARY KEY, v text);
CREATE TABLE sk2 (id integer PRIMARY KEY, v text);
});

my @tenant = (tenant_column => 'tenant', tenant_strategy => 'attribute');
AshTest::setup_pipeline($src, $dst, sink => $sink, publication => 'pub_cv',
	census => '{"interval_ms": 500}',
	ignored_sources => ['public.ign'],
	maps => [ ['base'], [ 'ten', @tenant ], ['typ'],
		[ 'sk1', skip => ['junk'] ], [ 'sk2', skip => ['junk'] ] ]);
AshTest::wait_caught_up($src, $dst, $sink, name => 'pipeline streams')
  or BAIL_OUT('pipeline never streamed');
AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => 'healthy from the start');

$src->safe_psql($DB, q{
INSERT INTO base SELECT g, 'b' || g FROM generate_series(1, 20) g;
INSERT INTO ten SELECT g, 't' || (g % 3), 'v' || g FROM generate_series(1, 20) g;
INSERT INTO typ SELECT g, g, g, 'v' || g FROM generate_series(1, 20) g;
INSERT INTO sk1 SELECT g, 'v' || g, 'j' FROM generate_series(1, 5) g;
INSERT INTO sk2 SELECT g, 'v' || g, 'j' FROM generate_series(1, 5) g;
INSERT INTO ign VALUES (1, 'ignored');
});
AshTest::wait_caught_up($src, $dst, $sink);

# the comparison of every mirrored table: whole rows, or the mapped columns
# of a table with skipped columns
my @mirrored = qw(base ten);
my %typ_cols = (n => 1, m => 1, v => 1);
sub mirror_ok
{
	my ($label) = @_;
	AshTest::assert_mirror_equal($src, $dst, [@mirrored], name => $label);
	my %proj = (
		typ => join(', ', 'id', grep { $typ_cols{$_} } qw(n m v)),
		sk1 => 'id, v',
		sk2 => 'id, v');
	for my $t (sort keys %proj)
	{
		my $q = "(SELECT $proj{$t} FROM $t)";
		is(AshTest::table_hash($dst, $q, 'id'), AshTest::table_hash($src, $q, 'id'),
			"$label: $t ($proj{$t})");
	}
}
mirror_ok('initial');


sub map_sql
{
	my ($target, %o) = @_;
	my @a = ("'$sink'", "'$target'::regclass");
	for my $k (sort keys %o)
	{
		my $v = $o{$k};
		push @a, "$k => " . (ref $v eq 'ARRAY' ? AshTest::text_array_literal(@$v) : AshTest::lit($v));
	}
	return "SELECT ash_replicant_map_table(" . join(', ', @a) . ")";
}


# preflight renders the same verdict as the worker
sub preflight_says
{
	my ($reason, $label) = @_;
	my $rows = $dst->safe_psql($DB,
		"SELECT string_agg(check_name, ',') FROM ash_replicant_preflight('$sink')"
		  . " WHERE verdict = 'fail' AND reason = " . AshTest::lit($reason));
	isnt($rows, '', "$label: preflight fails $reason too ($rows)");
}

my $base_id = 1000;

# A change made while stopped; start; misconfigured with the reason.
# A publication row replaced or dropped and re-created under this sink,
# which has no snapshot: the next start or census halts publication_gap
# (docs/reasons.md#publication_gap); no row changed in between, so the
# operator accepts it for every table and starts again.
sub acknowledge_gap
{
	my ($label) = @_;
	AshTest::wait_status($dst, $sink, 'halted', 'publication_gap', src => $src,
		name => "$label: halted publication_gap");
	AshTest::stop_settled($src, $dst, $sink);
	my ($sysid, $sdb) = AshTest::source_identity($src);
	is($dst->safe_psql($DB, "SELECT ash_replicant_acknowledge_publication_gap('$sink', '$sysid', '$sdb')"),
		't', "$label: the gap acknowledged");
	AshTest::start_sink($dst, $sink);
}

sub activation_case
{
	my (%c) = @_;
	my $label = "activation: $c{label}";
	AshTest::stop_settled($src, $dst, $sink);
	my $cp0 = AshTest::checkpoint_facts($dst, $sink);
	my $h0 = AshTest::table_hash($dst, 'base');
	$src->safe_psql($DB, $c{change});
	# a covered change behind it: the verdict comes before anything is applied
	unless ($c{no_covered_change})
	{
		$base_id++;
		$src->safe_psql($DB, "INSERT INTO base VALUES ($base_id, 'after the change')");
	}

	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'misconfigured', $c{reason}, src => $src,
		name => "$label: misconfigured $c{reason}");
	is(AshTest::checkpoint_facts($dst, $sink), $cp0, "$label: checkpoint untouched");
	is(AshTest::table_hash($dst, 'base'), $h0, "$label: nothing applied");
	preflight_says($c{reason}, $label);

	$c{fix}->();
	AshTest::start_sink($dst, $sink);
	acknowledge_gap($label) if $c{gap};
	AshTest::acknowledge_column_added($src, $dst, $sink, $c{added}, $label) if $c{added};
	AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => "$label: healthy after the fix");
	$src->safe_psql($DB, $c{after}) if $c{after};
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: caught up");
	mirror_ok("$label: mirror");
}

# A change while streaming; the census halts with the reason.
sub census_case
{
	my (%c) = @_;
	my $label = "census: $c{label}";
	AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => "$label: healthy before");
	AshTest::wait_caught_up($src, $dst, $sink, quiet => 1);
	my $cp0 = AshTest::checkpoint_facts($dst, $sink);
	$src->safe_psql($DB, $c{change});
	AshTest::wait_status($dst, $sink, 'misconfigured', $c{reason}, src => $src,
		name => "$label: census halts $c{reason}");
	is(AshTest::checkpoint_facts($dst, $sink), $cp0, "$label: checkpoint untouched");
	ok(scalar(AshTest::log_lines_like($dst,
		qr/event=pipeline\.halt sink=$sink reason=\Q$c{reason}\E class=misconfigured/)) >= 1,
		"$label: halt event");

	$c{fix}->();
	AshTest::start_sink($dst, $sink);
	acknowledge_gap($label) if $c{gap};
	# a column added to a table with rows: the census halts
	# source_column_added at once, or the table's next change does
	AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => "$label: healthy after the fix")
	  unless $c{added};
	$src->safe_psql($DB, $c{after}) if $c{after};
	AshTest::acknowledge_column_added($src, $dst, $sink, $c{added}, $label) if $c{added};
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: caught up");
	mirror_ok("$label: mirror");
}

########################################################################
# a table added to the publication: source_table_unmapped -> map it
########################################################################
activation_case(label => 'table added', reason => 'source_table_unmapped',
	change => q{ALTER PUBLICATION pub_cv ADD TABLE extra1;
		INSERT INTO extra1 SELECT g, 'e' || g FROM generate_series(1, 5) g;},
	fix => sub { $dst->safe_psql($DB, map_sql('extra1')); push @mirrored, 'extra1'; },
	after => q{UPDATE extra1 SET v = 'changed' WHERE id = 2; DELETE FROM extra1 WHERE id = 3;});

census_case(label => 'table added', reason => 'source_table_unmapped',
	change => q{ALTER PUBLICATION pub_cv ADD TABLE extra2},
	fix => sub { $dst->safe_psql($DB, map_sql('extra2')); push @mirrored, 'extra2'; },
	after => q{INSERT INTO extra2 SELECT g, 'e' || g FROM generate_series(1, 5) g});

########################################################################
# a column added at the source: source_column_unmapped -> add it to the
# target; then source_column_added -> acknowledged (added without a default)
########################################################################
activation_case(label => 'column added', reason => 'source_column_unmapped', added => 'base',
	change => q{ALTER TABLE base ADD COLUMN c1 integer;
		UPDATE base SET c1 = id WHERE id <= 5;},
	fix => sub { $dst->safe_psql($DB, 'ALTER TABLE base ADD COLUMN c1 integer'); });

census_case(label => 'column added', reason => 'source_column_unmapped', added => 'extra1',
	change => q{ALTER TABLE extra1 ADD COLUMN c2 text},
	fix => sub { $dst->safe_psql($DB, 'ALTER TABLE extra1 ADD COLUMN c2 text'); },
	after => q{UPDATE extra1 SET c2 = 'x' || id; INSERT INTO extra1 VALUES (10, 'e10', 'c10');});

########################################################################
# a column type changed: source_type_invalid -> skip the column
########################################################################
activation_case(label => 'type changed', reason => 'source_type_invalid',
	change => q{ALTER TABLE typ ALTER COLUMN n TYPE numeric},
	fix => sub { $dst->safe_psql($DB, map_sql('typ', skip => ['n'])); delete $typ_cols{n}; },
	after => q{INSERT INTO typ VALUES (100, 1.5, 100, 'v100'); UPDATE typ SET v = 'u' WHERE id = 1;});

census_case(label => 'type changed', reason => 'source_type_invalid',
	change => q{ALTER TABLE typ ALTER COLUMN m TYPE bigint},
	fix => sub { $dst->safe_psql($DB, map_sql('typ', skip => [ 'n', 'm' ])); delete $typ_cols{m}; },
	after => q{INSERT INTO typ VALUES (101, 2.5, 10000000000, 'v101'); DELETE FROM typ WHERE id = 2;});

########################################################################
# replica identity of a tenant-scoped table: source_replica_identity ->
# REPLICA IDENTITY FULL again (no row of it changes while it is not FULL)
########################################################################
activation_case(label => 'replica identity', reason => 'source_replica_identity',
	change => q{ALTER TABLE ten REPLICA IDENTITY DEFAULT},
	fix => sub { $src->safe_psql($DB, 'ALTER TABLE ten REPLICA IDENTITY FULL'); },
	after => q{UPDATE ten SET v = 'moved', tenant = 't9' WHERE id = 4; DELETE FROM ten WHERE id = 5;});

census_case(label => 'replica identity', reason => 'source_replica_identity',
	change => q{ALTER TABLE ten REPLICA IDENTITY USING INDEX ten_pkey},
	fix => sub { $src->safe_psql($DB, 'ALTER TABLE ten REPLICA IDENTITY FULL'); },
	after => q{UPDATE ten SET v = 'again' WHERE id = 6; DELETE FROM ten WHERE id = 7;});

########################################################################
# a skipped column dropped at the source: source_column_missing ->
# on_schema_change => 'ignore'
########################################################################
activation_case(label => 'skipped column dropped', reason => 'source_column_missing',
	change => q{ALTER TABLE sk1 DROP COLUMN junk},
	fix => sub { $dst->safe_psql($DB, map_sql('sk1', skip => ['junk'], on_schema_change => 'ignore')); },
	after => q{INSERT INTO sk1 VALUES (10, 'v10'); UPDATE sk1 SET v = 'u' WHERE id = 1;});

census_case(label => 'skipped column dropped', reason => 'source_column_missing',
	change => q{ALTER TABLE sk2 DROP COLUMN junk},
	fix => sub { $dst->safe_psql($DB, map_sql('sk2', skip => ['junk'], on_schema_change => 'ignore')); },
	after => q{INSERT INTO sk2 VALUES (10, 'v10'); DELETE FROM sk2 WHERE id = 1;});

########################################################################
# a mapped and an ignored table leave the table set: warnings only
########################################################################
{
	my $label = 'activation: tables left the publication';
	AshTest::stop_settled($src, $dst, $sink);
	my $offset = -s $dst->logfile;
	$src->safe_psql($DB, 'ALTER PUBLICATION pub_cv DROP TABLE sk1, ign');
	AshTest::start_sink($dst, $sink);
	AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => "$label: healthy");
	ok($dst->wait_for_log(qr/event=coverage\.warning sink=$sink reason=mapping_never_matches/, $offset),
		"$label: mapping_never_matches logged");
	ok($dst->wait_for_log(qr/event=coverage\.warning sink=$sink reason=ignore_never_matches/, $offset),
		"$label: ignore_never_matches logged");
	my $warned = () = AshTest::log_lines_like($dst, qr/event=coverage\.warning sink=$sink reason=mapping_never_matches/);

	# back into the publication: the census finds the mapped table's gap
	# (publication_gap, test 108); acknowledged, rows flow again
	$src->safe_psql($DB, 'ALTER PUBLICATION pub_cv ADD TABLE sk1, ign');
	acknowledge_gap($label);
	$src->safe_psql($DB, q{INSERT INTO sk1 VALUES (20, 'back'); INSERT INTO ign VALUES (2, 'still ignored')});
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: caught up");
	AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => "$label: still healthy");
	mirror_ok("$label: mirror");
	my $now = () = AshTest::log_lines_like($dst, qr/event=coverage\.warning sink=$sink reason=mapping_never_matches/);
	is($now, $warned, "$label: a warning is logged when it appears, not at every census");
}
{
	my $label = 'census: a mapped table dropped at the source';
	my $offset = -s $dst->logfile;
	$src->safe_psql($DB, 'DROP TABLE extra2');
	@mirrored = grep { $_ ne 'extra2' } @mirrored;
	ok($dst->wait_for_log(qr/event=coverage\.warning sink=$sink reason=mapping_never_matches/, $offset),
		"$label: mapping_never_matches logged");
	$src->safe_psql($DB, q{INSERT INTO base VALUES (2000, 'after the drop')});
	AshTest::wait_caught_up($src, $dst, $sink, name => "$label: streams on");
	AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => "$label: still healthy");
	mirror_ok("$label: mirror");
}

########################################################################
# the publication dropped: source_publication_missing -> recreate it.
# No row changes while it is gone: PostgreSQL 15's pgoutput cannot decode a
# change from before the publication existed again.
########################################################################
my $recreate = sub {
	$src->safe_psql($DB,
		"CREATE PUBLICATION pub_cv FOR TABLE base, ten, typ, sk1, sk2, ign, extra1, " . AshTest::marker_table($sink));
};
activation_case(label => 'publication dropped', reason => 'source_publication_missing',
	change => q{DROP PUBLICATION pub_cv}, fix => $recreate, no_covered_change => 1, gap => 1,
	after => q{INSERT INTO extra1 VALUES (30, 'e30', NULL)});

census_case(label => 'publication dropped', reason => 'source_publication_missing',
	change => q{DROP PUBLICATION pub_cv}, fix => $recreate, gap => 1,
	after => q{INSERT INTO extra1 VALUES (31, 'e31', NULL)});

########################################################################
# cu: a probe the source refuses.  The role may hold one connection; a
# walsender does not count against it, so while the test holds that one
# connection the replication connection works and the probe is refused.
########################################################################
{
	my $cu = 'cu';
	$src->safe_psql($DB, q{
CREATE ROLE lim LOGIN REPLICATION CONNECTION LIMIT 1;
CREATE PUBLICATION pub_cu;
});
	my $holder;
	my $holder_sql = "SELECT count(*) = 1 FROM pg_stat_activity WHERE usename = 'lim'"
	  . " AND backend_type = 'client backend' AND query LIKE '%pg_sleep(600)%'";
	# The limit counts every connection of the role: a holder that connects
	# while a census probe is connected is refused itself (and the probes
	# then get through).  Start it again until it holds the one connection.
	my $hold = sub {
		for my $try (1 .. 50)
		{
			my ($out, $err) = ('', '');
			# the census keeps its connection between runs: end it
			$src->safe_psql($DB, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
				  . " WHERE usename = 'lim' AND application_name = 'ash_replicant census'");
			$holder = IPC::Run::start(
				[ 'psql', '-X', '-h', $src->host, '-p', $src->port, '-U', 'lim', '-d', $DB,
					'-c', 'SELECT pg_sleep(600)' ],
				'>', \$out, '2>', \$err);
			for (1 .. 100)
			{
				return if $src->safe_psql($DB, $holder_sql) eq 't';
				eval { $holder->pump_nb };
				last unless $holder->pumpable;
				select(undef, undef, undef, 0.1);
			}
			eval { $holder->kill_kill; $holder->finish };
			note "cu: the holder was refused (try $try): $err";
		}
		fail('cu: a holder holds the one connection of role lim');
	};
	my $release = sub {
		$src->safe_psql($DB, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
			  . " WHERE usename = 'lim' AND backend_type = 'client backend' AND query LIKE '%pg_sleep%'");
		eval { $holder->finish };
	};

	$hold->();
	my $offset = -s $dst->logfile;
	AshTest::setup_pipeline($src, $dst, sink => $cu, publication => 'pub_cu',
		connection => AshTest::conninfo($src) =~ s/user=\S+/user=lim/r,
		census => '{"interval_ms": 500, "max_consecutive_faults": 2}');
	ok($dst->wait_for_log(qr/event=source\.fault sink=$cu step=coverage/, $offset),
		'cu: a refused probe is a source fault at the coverage step');
	ok($dst->wait_for_log(qr/event=source\.fault sink=$cu step=coverage.*\n(?s:.*)event=source\.fault sink=$cu step=coverage/, $offset),
		'cu: and retried');
	my $st = AshTest::status_row($dst, $cu) // {};
	is($st->{state}, 'catching_up', 'cu: reconnecting, neither halted nor healthy');
	is($dst->safe_psql($DB, AshTest::checkpoint_sql($cu, 'count(*)')), '0',
		'cu: no checkpoint bound before the verdict');
	is($src->safe_psql($DB, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '$cu'"), '0',
		'cu: no slot created before the verdict');

	$release->();
	AshTest::wait_status($dst, $cu, 'healthy', undef, src => $src,
		name => 'cu: verdict rendered on the first reachable probe');
	AshTest::wait_caught_up($src, $dst, $cu, name => 'cu: streams');

	# the census probe refused in a row: census_unverifiable
	$hold->();
	AshTest::wait_status($dst, $cu, 'halted', 'census_unverifiable', src => $src,
		name => 'cu: refused census probes halt census_unverifiable');
	$release->();
}

# the sink cv was not disturbed by cu
AshTest::wait_status($dst, $sink, 'healthy', undef, src => $src, name => 'cv still healthy');
AshTest::wait_caught_up($src, $dst, $sink, name => 'final catch-up');
mirror_ok('final');

# The census keeps its source connection from one run to the next (a new
# connection and a new backend's cold caches were two thirds of a run's
# time, during which the worker applies nothing); one the source ended is
# opened again at the next run, which is no census fault.
my $census_conn = "FROM pg_stat_activity WHERE application_name = 'ash_replicant census'"
  . " AND usename <> 'lim'";
ok(AshTest::census_runs($dst, $sink, 1) && AshTest::poll($src, "SELECT count(*) = 1 AND bool_and(state = 'idle') $census_conn"),
	'the census connection stays open between runs, idle');
my $census_pid = $src->safe_psql($DB, "SELECT pid $census_conn");
ok(AshTest::census_runs($dst, $sink, 2), 'two more census runs');
is($src->safe_psql($DB, "SELECT pid $census_conn"), $census_pid, 'they used the same connection');
# ended between two runs (a run takes milliseconds of each second): ended
# during one, that run would rightly count a fault
ok(AshTest::census_runs($dst, $sink, 1), 'a run has just ended');
my $census_log = -s $dst->logfile;
is($src->safe_psql($DB, "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) $census_conn"
		  . " AND pid = $census_pid AND state = 'idle'"), '1', 'the source ends the idle census connection');
ok(AshTest::census_runs($dst, $sink, 2), 'census runs after the source ended the census connection');
my $new_pid = $src->safe_psql($DB, "SELECT pid $census_conn");
ok($new_pid ne '' && $new_pid ne $census_pid, 'the census opened a new connection');
is($dst->safe_psql($DB,
		"SELECT last_census_verdict FROM ash_replicant.stat_pipelines WHERE sink_name = '$sink'"),
	'pass', 'and passed');
unlike(slurp_file($dst->logfile, $census_log), qr/event=census\.fault sink=$sink /,
	'no census fault for the ended connection');

# Its catalog queries are prepared on it once and planned once (a run spent
# most of its time planning them): every run executes named statements,
# none of them sent unprepared.
$src->safe_psql($DB, "ALTER SYSTEM SET log_statement = 'all'");
$src->safe_psql($DB, 'SELECT pg_reload_conf()');
my $src_log = -s $src->logfile;
ok(AshTest::census_runs($dst, $sink, 2), 'two census runs logged on the source');
my @census_lines = grep { /ash_replicant census LOG:  (?:execute|statement)/ }
  split /\n/, slurp_file($src->logfile, $src_log);
ok((grep { /execute ash_replicant_\d+: SELECT/ } @census_lines) >= 4,
	'the census executes its catalog queries as prepared statements');
is(scalar(grep { /execute <unnamed>/ } @census_lines), 0, 'none of them unprepared');
$src->safe_psql($DB, 'ALTER SYSTEM RESET log_statement');
$src->safe_psql($DB, 'SELECT pg_reload_conf()');

done_testing();
