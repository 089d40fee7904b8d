# AshTest — shared harness of the ash_replicant end-to-end TAP tests.
#
# Every test builds its own SOURCE/DESTINATION pair with start_pair(), wires a
# pipeline with setup_pipeline() and synchronizes only with poll_query_until,
# never by sleeping for a state (the one bounded wait loop, in crash_restart,
# waits for killed processes to be gone while the server cannot be queried).
#
#   use lib 'test/t';
#   use AshTest;
#   my ($src, $dst) = AshTest::start_pair();
#
# Conventions
#   - Both nodes are initdb'd with UTF8/C so text comparisons are byte exact.
#   - The source listens on 127.0.0.1 (TCP, trust) for normal and replication
#     connections; the destination preloads ash_replicant and has the extension.
#   - setup_pipeline() also creates, publishes and maps a per-sink marker table
#     "ash_marker_<sink>"; wait_caught_up() commits a marker row at the source
#     and waits for the destination watermark to reach that commit (see there).
#   - Exact source commit LSNs come from the source's WAL (pg_walinspect, created
#     by start_pair): commit_tracked() runs a transaction and returns the
#     (commit_lsn, end_lsn) of its commit record.
#   - Waits return early when the pipeline reaches a terminal state (halted /
#     misconfigured) so a broken pipeline fails in seconds, not minutes; after the
#     first timed-out wait the remaining waits of the file use a short timeout,
#     so a test against an unfinished product still ends in bounded time.
package AshTest;

use strict;
use warnings;

use Carp;
use JSON::PP;
use Time::HiRes qw(usleep time);
use IO::Select;
use IO::Socket::INET;
use IPC::Run;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our $DB = 'postgres';

# Default timeout (seconds) of one wait; ASH_WAIT_TIMEOUT overrides.
our $WAIT_TIMEOUT = $ENV{ASH_WAIT_TIMEOUT} || 90;
# After one wait timed out, later waits of the same file use this.
our $DEGRADED_TIMEOUT = 5;
our $degraded = 0;

# A file that runs past ASH_FILE_LIMIT seconds (1200; 3600 with ASH_LONG)
# fails rather than hanging the whole run: a source commit waiting for a
# synchronous standby that halted waits forever, and no psql call is
# bounded.  exit runs the END blocks, which stop the nodes.
my $file_limit = $ENV{ASH_FILE_LIMIT} || ($ENV{ASH_LONG} ? 3600 : 1200);
$SIG{ALRM} = sub {
	Test::More::fail("the test file ends within its ${file_limit}s limit");
	exit 1;
};
alarm($file_limit);

my %marker_seq;

##############################################################################
# Nodes
##############################################################################

# start_pair(%opts) -> ($src, $dst)
#   name_prefix      node name prefix ['']: nodes are "<prefix>src", "<prefix>dst"
#   log_statement    for both nodes ['all']; 'none' when a test greps logs for
#                    values it sent to the source itself
#   src_conf, dst_conf  extra postgresql.conf text
#   dst_encoding     the destination cluster's encoding ['UTF8']
#   no_extension     do not CREATE EXTENSION on the destination
sub start_pair
{
	my (%o) = @_;
	my $prefix = $o{name_prefix} // '';
	my $log_statement = $o{log_statement} // 'all';

	my $src = PostgreSQL::Test::Cluster->new("${prefix}src");
	$src->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
	$src->append_conf('postgresql.conf', qq{
listen_addresses = '127.0.0.1'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
max_connections = 60
log_statement = '$log_statement'
} . ($o{src_conf} // ''));
	# TCP from 127.0.0.1, trust, for normal and replication connections.
	$src->append_conf('pg_hba.conf', qq{
host all all 127.0.0.1/32 trust
host replication all 127.0.0.1/32 trust
});
	$src->start;
	$src->safe_psql($DB, 'CREATE EXTENSION IF NOT EXISTS pg_walinspect');

	my $dst = start_destination("${prefix}dst", %o, log_statement => $log_statement);

	note "source port " . $src->port . ", destination port " . $dst->port;
	return ($src, $dst);
}

# start_destination($name, %opts) -> $node: a destination cluster as
# start_pair makes it (the library preloaded, its launcher in $DB), the
# extension created unless no_extension; options as start_pair's
# (log_statement, dst_conf, dst_encoding, no_extension).
sub start_destination
{
	my ($name, %o) = @_;
	my $log_statement = $o{log_statement} // 'all';
	my $dst = PostgreSQL::Test::Cluster->new($name);
	$dst->init(extra => [ '--encoding=' . ($o{dst_encoding} // 'UTF8'), '--locale=C' ]);
	$dst->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'ash_replicant'
ash_replicant.database = 'postgres'
ash_replicant.naptime = '500ms'
ash_replicant.reconnect_min_delay = '200ms'
ash_replicant.reconnect_max_delay = '2s'
ash_replicant.receive_timeout = '10s'
max_worker_processes = 24
max_connections = 60
# every sink that has run holds a replication origin (replication state slot)
# until it is dropped: room for the tests that create many sinks
max_replication_slots = 32
log_statement = '$log_statement'
} . ($o{dst_conf} // ''));
	$dst->start;
	$dst->safe_psql($DB, 'CREATE EXTENSION ash_replicant') unless $o{no_extension};
	return $dst;
}

# Run the same SQL on both nodes (DDL of identical tables, types, domains).
sub both
{
	my ($src, $dst, $sql) = @_;
	$src->safe_psql($DB, $sql);
	$dst->safe_psql($DB, $sql);
	return;
}

# (system_identifier, database) of a node, as the pipeline must be configured.
sub source_identity
{
	my ($node) = @_;
	my $out = $node->safe_psql($DB,
		'SELECT system_identifier::text, current_database() FROM pg_control_system()');
	my ($sysid, $db) = split /\|/, $out;
	return ($sysid, $db);
}

sub source_timeline
{
	my ($node) = @_;
	return $node->safe_psql($DB, 'SELECT timeline_id FROM pg_control_checkpoint()');
}

# libpq conninfo of a node over TCP (what the pipeline uses).
sub conninfo
{
	my ($node, %o) = @_;
	my $user = $node->safe_psql($DB, 'SELECT current_user');
	my $db = $o{dbname} // $DB;
	return "host=127.0.0.1 port=" . $node->port . " dbname=$db user=$user";
}

# SQL literal (standard_conforming_strings on).
sub lit
{
	my ($s) = @_;
	return 'NULL' unless defined $s;
	$s =~ s/'/''/g;
	return "'$s'";
}

sub text_array_literal
{
	my (@items) = @_;
	return "'{}'::text[]" unless @items;
	return 'ARRAY[' . join(',', map { lit($_) } @items) . ']::text[]';
}

# write_audit_sql($table, $keytype): SQL creating "<table>_audit (id, op)" and an
# AFTER INSERT OR UPDATE row trigger on $table that logs (NEW.id, TG_OP) into it.
# Run on both ends, it proves effect-once: per key, a change applied twice
# writes its row twice.
sub write_audit_sql
{
	my ($table, $keytype) = @_;
	return qq{
CREATE TABLE ${table}_audit (id $keytype NOT NULL, op text NOT NULL);
CREATE FUNCTION ${table}_audit_fn() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
	INSERT INTO ${table}_audit VALUES (NEW.id, TG_OP);
	RETURN NULL;
END \$\$;
CREATE TRIGGER ${table}_audit AFTER INSERT OR UPDATE ON $table
	FOR EACH ROW EXECUTE FUNCTION ${table}_audit_fn();
};
}

##############################################################################
# Pipeline setup
##############################################################################

sub marker_table { my ($sink) = @_; return "ash_marker_$sink"; }

# The structural columns of an append-log target (docs/history-and-events.md),
# to put before its payload columns, and its five identity axes as a column
# list (the unique index over them is what makes re-delivery append nothing).
sub append_log_columns
{
	return q{source_system_id text NOT NULL, source_database text NOT NULL,
	slot_name text NOT NULL, commit_lsn bigint NOT NULL, ordinal integer NOT NULL,
	operation text NOT NULL, origin text NOT NULL, snapshot_attempt bytea,
	message_prefix text, message_content bytea};
}

sub append_log_axes { return 'source_system_id, source_database, slot_name, commit_lsn, ordinal'; }

# setup_pipeline($src, $dst, %o)
#   sink              sink name (also the slot name unless slot => ...)
#   publication       publication name (must exist on the source); or
#   decoder, tables   a decoder without publication: 'wal2json' and its
#                     tables (array ref of 'schema.table'); the marker table
#                     joins them
#   maps              [ [ 'target', name => value, ... ], ... ]  each becomes
#                     ash_replicant_map_table(sink, 'target'::regclass, ...)
#   connection        [conninfo($src)]
#   source_system_identifier, source_database  [source_identity($src)]
#   census            jsonb text [$ENV{ASH_TEST_CENSUS} or '{"interval_ms": 1000}']
#   batch_max_transactions, ignored_sources (array ref), slot, owner (role name),
#   ignored_message_prefixes (array ref), recovery_horizon
#   marker            create/publish/map the marker table [1]
#   start             call ash_replicant_start [1]
#   pipeline_extra    extra "name => value" SQL for configure_pipeline
#   source_role       the role of connection: SELECT on the marker is granted to it
#   replication_sets  with decoder 'pglogical': its sets (array ref); the marker
#                     table joins the first
sub setup_pipeline
{
	my ($src, $dst, %o) = @_;
	my $sink = $o{sink} or croak 'sink required';
	my $slot = $o{slot} // $sink;
	my $pub  = $o{publication};
	my @tables = @{ $o{tables} // [] };
	my $sets = $o{replication_sets};
	croak 'publication or decoder required' unless defined $pub || $o{decoder};
	my ($sysid, $db) = source_identity($src);
	$sysid = $o{source_system_identifier} if exists $o{source_system_identifier};
	$db    = $o{source_database}          if exists $o{source_database};
	my $conn   = $o{connection} // conninfo($src);
	# ASH_TEST_CENSUS overrides the default census options (debugging only)
	my $census = $o{census} // ($ENV{ASH_TEST_CENSUS} || '{"interval_ms": 1000}');
	my $marker = $o{marker} // 1;

	if ($marker)
	{
		my $mt = marker_table($sink);
		both($src, $dst, "CREATE TABLE $mt (id bigint PRIMARY KEY, note text)");
		$src->safe_psql($DB, "ALTER PUBLICATION $pub ADD TABLE $mt") if defined $pub;
		$src->safe_psql($DB, "SELECT pglogical.replication_set_add_table(" . lit($sets->[0]) . ", '$mt')")
		  if ($o{decoder} // '') eq 'pglogical';
		push @tables, "public.$mt";
		# a role the pipeline connects as must read it (source_role)
		$src->safe_psql($DB, "GRANT SELECT ON $mt TO $o{source_role}") if $o{source_role};
	}

	my @sink_args = ("sink_name => " . lit($sink), "slot_name => " . lit($slot));
	push @sink_args, "batch_max_transactions => $o{batch_max_transactions}"
	  if defined $o{batch_max_transactions};
	push @sink_args, "ignored_sources => " . text_array_literal(@{ $o{ignored_sources} })
	  if $o{ignored_sources};
	push @sink_args, "ignored_message_prefixes => " . text_array_literal(@{ $o{ignored_message_prefixes} })
	  if $o{ignored_message_prefixes};
	push @sink_args, "owner => " . lit($o{owner}) . "::regrole" if $o{owner};
	push @sink_args, "recovery_horizon => " . lit($o{recovery_horizon}) . "::interval" if $o{recovery_horizon};

	my @sql = ("SELECT ash_replicant_create_sink(" . join(', ', @sink_args) . ")");
	my @maps = @{ $o{maps} // [] };
	push @maps, [ marker_table($sink) ] if $marker;
	for my $m (@maps)
	{
		my ($target, %mo) = @$m;
		my @a = ("sink_name => " . lit($sink), "target => " . lit($target) . "::regclass");
		for my $k (sort keys %mo)
		{
			my $v = $mo{$k};
			push @a, "$k => " . (ref $v eq 'ARRAY' ? text_array_literal(@$v) : lit($v));
		}
		push @sql, "SELECT ash_replicant_map_table(" . join(', ', @a) . ")";
	}
	my @p = (
		"sink_name => " . lit($sink),
		"connection => " . lit($conn),
		(defined $pub ? ("publication => " . lit($pub)) : ()),
		($o{decoder} ? ("decoder => " . lit($o{decoder})) : ()),
		(($o{decoder} // '') eq 'wal2json' ? ("tables => " . text_array_literal(@tables)) : ()),
		(($o{decoder} // '') eq 'pglogical' ? ("replication_sets => " . text_array_literal(@$sets)) : ()),
		"source_system_identifier => " . lit($sysid),
		"source_database => " . lit($db),
		"census => " . lit($census) . "::jsonb");
	push @p, $o{pipeline_extra} if $o{pipeline_extra};
	push @sql, "SELECT ash_replicant_configure_pipeline(" . join(', ', @p) . ")";
	push @sql, "SELECT ash_replicant_start(" . lit($sink) . ")" unless defined $o{start} && !$o{start};

	for my $stmt (@sql)
	{
		my ($rc, $out, $err) = $dst->psql($DB, $stmt);
		if ($rc != 0)
		{
			# The statement may carry a conninfo: print only its head.
			my $head = substr($stmt, 0, 60);
			croak "setup_pipeline($sink): '$head...' failed: $err";
		}
	}
	return;
}

# setup_append_log($src, $dst, $sink, $publication, @maps): an append-log
# sink, go-forward, its marker table mapped as an append log too (the caller
# creates it on both ends with append_log_columns()); each of @maps is the
# argument text of one ash_replicant_map_table after the sink name, e.g.
# "'ev_log'::regclass, source_table => 'ev', append_log => true".  Configures
# the pipeline (census every second) and starts it; croaks on a refusal
# without printing the conninfo.
sub setup_append_log
{
	my ($src, $dst, $sink, $pub, @maps) = @_;
	my ($sysid, $db) = source_identity($src);
	my $conn = conninfo($src);
	my $mt = marker_table($sink);
	for my $stmt (
		"SELECT ash_replicant_create_sink('$sink', sink_kind => 'append_log', initial_state => 'go_forward')",
		(map { "SELECT ash_replicant_map_table('$sink', $_)" } @maps),
		"SELECT ash_replicant_map_table('$sink', '$mt'::regclass, append_log => true)",
		"SELECT ash_replicant_configure_pipeline('$sink', " . lit($conn) . ", publication => '$pub',"
		  . " source_system_identifier => '$sysid', source_database => '$db', census => '{\"interval_ms\": 1000}')",
		"SELECT ash_replicant_start('$sink')")
	{
		my ($rc, $out, $err) = $dst->psql($DB, $stmt);
		croak "setup_append_log($sink): '" . substr($stmt, 0, 60) . "...' failed: $err" if $rc;
	}
	return;
}

sub start_sink
{
	my ($dst, $sink) = @_;
	my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_start(" . lit($sink) . ")");
	croak "ash_replicant_start($sink) failed: $err" if $rc;
	return $err;
}

sub stop_sink
{
	my ($dst, $sink) = @_;
	my ($rc, $out, $err) = $dst->psql($DB, "SELECT ash_replicant_stop(" . lit($sink) . ")");
	croak "ash_replicant_stop($sink) failed: $err" if $rc;
	return $err;
}

##############################################################################
# Observation
##############################################################################

sub json_rows
{
	my ($node, $sql) = @_;
	my $out = $node->safe_psql($DB, "SELECT row_to_json(x)::text FROM ($sql) x");
	return [ map { decode_json($_) } grep { length } split /\n/, $out ];
}

# hashref {sink_name, state, reason, worker_pid, since} or undef
sub status_row
{
	my ($dst, $sink) = @_;
	my $rows = json_rows($dst, "SELECT * FROM ash_replicant_status(" . lit($sink) . ")");
	return $rows->[0];
}

sub stat_row
{
	my ($dst, $sink) = @_;
	my $rows = json_rows($dst,
		"SELECT * FROM ash_replicant.stat_pipelines WHERE sink_name = " . lit($sink));
	return $rows->[0];
}

# The checkpoint row bound to the sink's configured source identity.
sub checkpoint_row
{
	my ($dst, $sink) = @_;
	my $rows = json_rows($dst, checkpoint_sql($sink, '*'));
	return $rows->[0];
}

sub checkpoint_sql
{
	my ($sink, $cols) = @_;
	return "SELECT $cols FROM ash_replicant.checkpoints c"
	  . " JOIN ash_replicant.sinks s ON s.slot_name = c.slot_name"
	  . " JOIN ash_replicant.pipelines p ON p.sink_name = s.sink_name"
	  . "  AND c.source_system_id = p.source_system_identifier"
	  . "  AND c.source_database = p.source_database"
	  . " WHERE s.sink_name = " . lit($sink);
}

sub checkpoint_lsn
{
	my ($dst, $sink) = @_;
	return $dst->safe_psql($DB, checkpoint_sql($sink, 'c.commit_lsn'));
}

# Everything the extension shows about itself, as one text blob: status,
# stats, and every catalog row (for "no value leaks" greps).
sub catalog_text
{
	my ($dst) = @_;
	my @parts;
	for my $sql (
		'SELECT * FROM ash_replicant_status()',
		'SELECT * FROM ash_replicant.stat_pipelines',
		'SELECT * FROM ash_replicant.sinks',
		'SELECT * FROM ash_replicant.pipelines',
		'SELECT * FROM ash_replicant.resources',
		'SELECT * FROM ash_replicant.checkpoints')
	{
		push @parts, $dst->safe_psql($DB, "SELECT row_to_json(x)::text FROM ($sql) x");
	}
	return join("\n", @parts);
}

# Diagnostics printed when a wait fails.
sub diag_pipeline
{
	my ($src, $dst, $sink) = @_;
	my $st  = eval { $dst->safe_psql($DB, "SELECT row_to_json(x) FROM ash_replicant_status(" . lit($sink) . ") x") } // "($@)";
	my $sp  = eval { $dst->safe_psql($DB, "SELECT row_to_json(x) FROM ash_replicant.stat_pipelines x WHERE sink_name = " . lit($sink)) } // "($@)";
	my $cp  = eval { $dst->safe_psql($DB, "SELECT row_to_json(x) FROM (" . checkpoint_sql($sink, 'c.timeline_id, c.commit_lsn, c.end_lsn, c.terminal_cause, c.terminal_class') . ") x") } // "($@)";
	my $sl  = $src ? (eval { $src->safe_psql($DB, "SELECT row_to_json(x) FROM (SELECT slot_name, active, active_pid, confirmed_flush_lsn, pg_current_wal_lsn() AS current FROM pg_replication_slots) x") } // "($@)") : '';
	diag "pipeline $sink: status=$st\n stat=$sp\n checkpoint=$cp\n source slots=$sl";
	diag "destination log tail:\n" . log_tail($dst, 25);
	return;
}

sub log_tail
{
	my ($node, $n) = @_;
	my @lines = split /\n/, slurp_file($node->logfile);
	@lines = grep { !/\bLOG:  statement: / } @lines;
	my $from = @lines > $n ? @lines - $n : 0;
	return join("\n", @lines[ $from .. $#lines ]);
}

##############################################################################
# Waiting
##############################################################################

sub _timeout
{
	my ($t) = @_;
	return $DEGRADED_TIMEOUT if $degraded;
	return $t // $WAIT_TIMEOUT;
}

# wait_until($cond, timeout => s): call $cond every 100 ms until it returns
# true (1) or the timeout passes (0).  For what no query answers (log lines).
sub wait_until
{
	my ($cond, %o) = @_;
	my $deadline = time + _timeout($o{timeout});
	while (1)
	{
		return 1 if $cond->();
		return 0 if time > $deadline;
		select(undef, undef, undef, 0.1);
	}
}

# poll($node, $sql, $expected, timeout => s): poll_query_until with a bounded
# timeout.  Returns 1 / 0.
sub poll
{
	my ($node, $sql, $expected, %o) = @_;
	my $t = _timeout($o{timeout});
	my $deadline = time + $t;
	my $ok;
	while (1)
	{
		# poll_query_until tries 10 times a second for 10 * timeout_default tries
		my $left = $deadline - time;
		local $PostgreSQL::Test::Utils::timeout_default = $left > 1 ? $left : 1;
		# a server that dies under the poll makes psql fail hard (it exits
		# before reading the query: a broken pipe): one that restarts -- the
		# crash recovery after a SIGKILL of any of its processes -- is asked
		# again; one that stays down fails the wait, not the file
		$ok = eval { $node->poll_query_until($DB, $sql, $expected // 't') };
		last if defined $ok;
		diag "poll on " . $node->name . " aborted: $@";
		last if time >= $deadline;
		usleep(200_000);
	}
	$degraded = 1 unless $ok;
	return $ok;
}

my $terminal_sql = "state IN ('halted', 'misconfigured')";

# wait_status($dst, $sink, $state, $reason, %o): wait until the sink reports
# $state (and $reason when defined), returning early on any terminal state;
# asserts the result.  Returns the final (state, reason).
sub wait_status
{
	my ($dst, $sink, $state, $reason, %o) = @_;
	my $want = "state = " . lit($state)
	  . (defined $reason ? " AND reason IS NOT DISTINCT FROM " . lit($reason) : '');
	my $stop = ($state eq 'halted' || $state eq 'misconfigured' || $o{no_early_exit})
	  ? 'false' : $terminal_sql;
	poll($dst,
		"SELECT count(*) > 0 FROM ash_replicant_status(" . lit($sink) . ") WHERE ($want) OR $stop",
		't', %o);
	my $row = status_row($dst, $sink) // {};
	my ($gs, $gr) = ($row->{state} // '(none)', $row->{reason} // '(null)');
	my $name = $o{name} // ("$sink reaches $state" . (defined $reason ? "/$reason" : ''));
	my $ok = ($gs eq $state) && (!defined $reason || $gr eq $reason);
	ok($ok, $name) or do { diag "got state=$gs reason=$gr"; diag_pipeline($o{src}, $dst, $sink); };
	return ($gs, $gr);
}

# Start a transaction on $node that runs $sql, and return the commit record's
# (commit_lsn, end_lsn) as the source's WAL shows it (pg_walinspect).  The
# commit LSN is what pgoutput reports as the transaction's commit LSN and what
# the destination checkpoint stores as its watermark.  $sql must change a row:
# pgoutput sends no empty transaction, so a caller waiting for its commit
# would wait in vain -- croaks when it changed none.  $after (optional) runs
# as soon as the transaction committed, before its WAL is read.
sub commit_tracked
{
	my ($node, $sql, $after) = @_;
	my $out = $node->safe_psql($DB,
		"BEGIN;\nSELECT pg_current_wal_insert_lsn()::text;\n$sql;\n"
		  . "SELECT pg_current_xact_id()::text || '|' || pg_current_wal_insert_lsn()::text;\nCOMMIT;");
	$after->() if $after;
	my @lines = split /\n/, $out;
	my $began = $lines[0];
	my ($xid, $from) = split /\|/, $lines[-1];

	# A transaction that wrote nothing before its commit record commits
	# asynchronously (PostgreSQL flushes at commit only what wrote WAL): its
	# commit record is readable once the WAL writer has flushed it.
	poll($node, "SELECT pg_current_wal_flush_lsn() > '$from'::pg_lsn", 't')
	  or croak "the WAL after $from was not flushed";
	my $rec = $node->safe_psql($DB,
		"SELECT start_lsn::text || '|' || end_lsn::text FROM pg_get_wal_records_info('$from', pg_current_wal_flush_lsn())"
		  . " WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT' AND xid::text = '$xid'");
	croak "commit record of xid $xid not found after $from" unless $rec;
	my ($commit, $end) = split /\|/, $rec;
	my $own = $node->safe_psql($DB,
		"SELECT count(*) FROM pg_get_wal_records_info('$began', '$end')"
		  . " WHERE xid::text = '$xid' AND resource_manager <> 'Transaction'");
	croak "commit_tracked: the statement changed no row (xid $xid), so its commit is never streamed"
	  unless $own > 0;
	return ($commit, $end);
}

# wait_lsn($src, $dst, $sink, $commit_lsn): wait until the destination's durable
# watermark (checkpoint commit_lsn of this sink's source identity) is at or past
# $commit_lsn; returns early if the pipeline halts.  Returns 1 when reached.
sub wait_lsn
{
	my ($src, $dst, $sink, $lsn, %o) = @_;
	my $reached = "coalesce((" . checkpoint_sql($sink, "c.commit_lsn >= '$lsn'::pg_lsn") . "), false)";
	poll($dst,
		"SELECT $reached OR EXISTS (SELECT 1 FROM ash_replicant_status(" . lit($sink) . ") WHERE $terminal_sql)",
		't', %o);
	my $ok = $dst->safe_psql($DB, "SELECT $reached") eq 't';
	unless ($ok)
	{
		diag "watermark of $sink did not reach $lsn";
		diag_pipeline($src, $dst, $sink);
	}
	return $ok;
}

# wait_slot_consistent($src, $dst, $sink): the sink's slot exists at the
# source and has reached its consistent point (confirmed_flush_lsn is set only
# then).  ash_replicant_start returns before the worker has created the slot; a
# go-forward mirror never sees what commits before that point, so a marker
# must not be committed earlier.  Cheap when the slot is long there.
sub wait_slot_consistent
{
	my ($src, $dst, $sink, %o) = @_;
	my $slot = $dst->safe_psql($DB, "SELECT slot_name FROM ash_replicant.sinks WHERE sink_name = " . lit($sink));
	return poll($src,
		"SELECT count(*) = 1 FROM pg_replication_slots WHERE slot_name = " . lit($slot)
		  . " AND confirmed_flush_lsn IS NOT NULL",
		't', timeout => $o{timeout} // 30);
}

# census_runs($dst, $sink, $n): $n census runs of the sink ended one after
# another since now ($n default 1); false when one does not end in time.
sub census_runs
{
	my ($dst, $sink, $n) = @_;
	my $of = "FROM ash_replicant.stat_pipelines WHERE sink_name = " . lit($sink);
	for (1 .. ($n // 1))
	{
		my $at = $dst->safe_psql($DB, "SELECT coalesce(last_census_at, '-infinity') $of");
		poll($dst, "SELECT last_census_at > '$at' $of") or return 0;
	}
	return 1;
}

# wait_caught_up($src, $dst, $sink): everything committed at the source before
# this call is applied at the destination.
#
# How: a source transaction's commit LSN is not pg_current_wal_lsn() (later WAL
# from other activity, e.g. running-xacts or checkpoint records, may follow it
# and never be "applied"), and an idle pipeline never writes a watermark for WAL
# that carries no published change.  So we commit one MARKER row into the
# sink's published, mapped marker table, read that transaction's exact commit
# LSN from the source WAL, and wait until (a) the destination checkpoint
# watermark is >= it and (b) the marker row is visible at the destination.
# Transactions are applied in commit order, so every earlier source commit is
# then applied too.  Returns the marker's commit LSN, or undef on failure (with
# a failed assertion unless quiet).
sub wait_caught_up
{
	my ($src, $dst, $sink, %o) = @_;
	my $mt = marker_table($sink);
	my $id = ++$marker_seq{$sink};
	wait_slot_consistent($src, $dst, $sink);
	my ($commit) = commit_tracked($src, "INSERT INTO $mt VALUES ($id, 'marker')");
	my $ok = wait_lsn($src, $dst, $sink, $commit, %o)
	  && $dst->safe_psql($DB, "SELECT count(*) FROM $mt WHERE id = $id") eq '1';
	ok($ok, $o{name} // "$sink caught up to source commit $commit") unless $o{quiet};
	return $ok ? $commit : undef;
}

##############################################################################
# Comparing
##############################################################################

# Deterministic text of rows: fixed time zone, date style and float digits.
my $norm = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 3;";

sub primary_key_order
{
	my ($node, $table) = @_;
	my $k = $node->safe_psql($DB, qq{
		SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.ord)
		FROM pg_index i
		CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = '$table'::regclass AND i.indisprimary});
	return $k ne '' ? $k : 't::text';
}

# table_hash($node, $table, $order_by, $where): md5 of the row texts, ordered
sub table_hash
{
	my ($node, $table, $order_by, $where) = @_;
	$order_by //= primary_key_order($node, $table);
	$where = $where ? "WHERE $where" : '';
	my $out = $node->safe_psql($DB,
		"$norm SELECT md5(coalesce(string_agg(t::text, E'\\n' ORDER BY $order_by), '')) || ' ' || count(*) FROM $table t $where");
	return $out;    # "<md5> <count>"
}

sub table_rows
{
	my ($node, $table, $order_by, $where, $limit) = @_;
	$order_by //= primary_key_order($node, $table);
	$where = $where ? "WHERE $where" : '';
	$limit //= 100000;
	my $out = $node->safe_psql($DB,
		"$norm SELECT replace(t::text, E'\\n', '\\n') FROM $table t $where ORDER BY $order_by LIMIT $limit");
	return [ split /\n/, $out ];
}

# assert_mirror_equal($src, $dst, [tables...], %o): same content hash and row
# count at both ends; prints the first differing rows on failure.
#   where => SQL filter applied at both ends, name => test name prefix
sub assert_mirror_equal
{
	my ($src, $dst, $tables, %o) = @_;
	my $all = 1;
	for my $t (@$tables)
	{
		my $ord = $o{order_by} // primary_key_order($src, $t);
		my $hs = table_hash($src, $t, $ord, $o{where});
		my $hd = table_hash($dst, $t, $ord, $o{where});
		my $name = ($o{name} // 'mirror equals source') . ": $t";
		unless (is($hd, $hs, $name))
		{
			$all = 0;
			my $rs = table_rows($src, $t, $ord, $o{where}, 20000);
			my $rd = table_rows($dst, $t, $ord, $o{where}, 20000);
			my %s = map { $_ => 1 } @$rs;
			my %d = map { $_ => 1 } @$rd;
			my @only_s = grep { !$d{$_} } @$rs;
			my @only_d = grep { !$s{$_} } @$rd;
			my $cut = sub { my $r = shift; length($r) > 300 ? substr($r, 0, 300) . '...' : $r };
			diag "$t: " . scalar(@only_s) . " rows only at source, " . scalar(@only_d) . " only at destination";
			diag "  source only: " . $cut->($_) for @only_s[ 0 .. ($#only_s < 9 ? $#only_s : 9) ];
			diag "  destination only: " . $cut->($_) for @only_d[ 0 .. ($#only_d < 9 ? $#only_d : 9) ];
		}
	}
	return $all;
}

# assert_writes_bounded($src, $dst, %o): effect-once of a state mirror whose table was
# copied at F (snapshot_tables.snapshot_lsn) while the source changed.  The
# destination's write audit (write_audit_sql: one row per written row) may
# hold, per key the source changed, at most: one write for the copy (when the
# key existed at F) plus one per source row change of the key committed at
# or after F.  A change below F applied on top of the copy (no floor) or a
# copy applied twice exceeds it.  The SOURCE audit $o{src_audit} (xid, op W
# for a written NEW.id / D for a removed OLD.id, seq) records the changes;
# keys up to $o{initial} existed before.
sub assert_writes_bounded
{
	my ($src, $dst, %o) = @_;
	my $bounds = $src->safe_psql($DB, qq{
WITH c AS (SELECT xid::text AS xid, (start_lsn - '0/0'::pg_lsn)::bigint AS lsn
           FROM pg_get_wal_records_info('$o{wal_from}', pg_current_wal_flush_lsn())
           WHERE resource_manager = 'Transaction' AND record_type = 'COMMIT'),
     e AS (SELECT a.id, a.op, a.seq, c.lsn FROM $o{src_audit} a JOIN c USING (xid)),
     s AS (SELECT DISTINCT id, -1::bigint AS lsn, 0::bigint AS seq, 'W' AS op FROM e WHERE id <= $o{initial}
           UNION ALL SELECT id, lsn, seq, op FROM e),
     f AS (SELECT DISTINCT ON (id) id, op FROM s WHERE lsn < $o{F} ORDER BY id, lsn DESC, seq DESC)
SELECT k.id || ':' || ((SELECT count(*) FROM f WHERE f.id = k.id AND f.op = 'W')
                       + (SELECT count(*) FROM e WHERE e.id = k.id AND e.op = 'W' AND e.lsn >= $o{F}))
  || ':' || (SELECT count(*) FROM e WHERE e.id = k.id AND e.op = 'W' AND e.lsn < $o{F})
FROM (SELECT DISTINCT id FROM e) k ORDER BY k.id});
	my (%bound, $below);
	for (split /\n/, $bounds)
	{
		my ($id, $b, $bf) = split /:/;
		$bound{$id} = $b;
		$below += $bf;
	}
	ok($below > 0, "$o{label}: the source changed keys below the copy's position ($below row changes)");
	my %got = map { split /:/ } split /\n/, $dst->safe_psql($DB,
		"SELECT id || ':' || count(*) FROM $o{dst_audit} WHERE id = ANY ('{" . join(',', sort { $a <=> $b } keys %bound)
		  . "}'::integer[]) GROUP BY id");
	my @over = grep { ($got{$_} // 0) > $bound{$_} } sort { $a <=> $b } keys %bound;
	ok(keys(%bound) > 0 && !@over, "$o{label}: no key the source changed was written more often than the copy at F and the changes at or after F allow")
	  or diag join(', ', map { "key $_: $got{$_} writes, at most $bound{$_}" } @over[ 0 .. ($#over < 9 ? $#over : 9) ]);
}

# ===========================================================================

##############################################################################
# Logs
##############################################################################

sub log_files
{
	my ($node) = @_;
	my @f = ($node->logfile);
	push @f, glob($node->data_dir . '/log/*'), glob($node->data_dir . '/pg_log/*');
	return grep { -f $_ } @f;
}

# grep_logs_for($string, @nodes): every server log line (of every log file of
# every node) containing $string, as "node: line".
sub grep_logs_for
{
	my ($needle, @nodes) = @_;
	my @hits;
	for my $node (@nodes)
	{
		for my $f (log_files($node))
		{
			for my $line (split /\n/, slurp_file($f))
			{
				push @hits, $node->name . ": $line" if index($line, $needle) >= 0;
			}
		}
	}
	return @hits;
}

# Log lines of a node matching a regex.
sub log_lines_like
{
	my ($node, $re) = @_;
	my @hits;
	for my $f (log_files($node))
	{
		push @hits, grep { $_ =~ $re } split /\n/, slurp_file($f);
	}
	return @hits;
}

# halt_line($dst, $sink, $reason): the sink's last event=pipeline.halt log
# line with that reason ('' when none): its context says why.
sub halt_line
{
	my ($dst, $sink, $reason) = @_;
	my @l = log_lines_like($dst, qr/event=pipeline\.halt sink=\Q$sink\E reason=\Q$reason\E /);
	return $l[-1] // '';
}

# preflight_verdict($dst, $sink, $check): "verdict/reason" of one check of
# ash_replicant_preflight (reason '' when none).
sub preflight_verdict
{
	my ($dst, $sink, $check) = @_;
	return $dst->safe_psql($DB, "SELECT verdict || '/' || coalesce(reason, '')"
		  . " FROM ash_replicant_preflight(" . lit($sink) . ") WHERE check_name = " . lit($check));
}

# halt_left_nothing($dst, $sink, $count_sql, $count, $facts): after a halt,
# nothing of the failing transaction committed ($count_sql on the
# destination still answers $count) and the checkpoint is as it was
# before ($facts, from checkpoint_facts).
sub halt_left_nothing
{
	my ($dst, $sink, $count_sql, $count, $facts) = @_;
	is($dst->safe_psql($DB, $count_sql), $count, '... nothing of the transaction committed');
	is(checkpoint_facts($dst, $sink), $facts, '... the checkpoint unchanged');
}

# Every fact of the sink's checkpoint row, one string: "a halt leaves the
# checkpoint unchanged" compares two of these.
sub checkpoint_facts
{
	my ($dst, $sink) = @_;
	return $dst->safe_psql($DB, checkpoint_sql($sink,
		"concat_ws('|', c.commit_lsn, c.end_lsn, c.timeline_id, c.decoder, encode(c.contract_fingerprint, 'hex'),"
		  . " encode(c.snapshot_state, 'hex'), c.origin_floor, encode(c.digest_key_witness, 'hex'))"));
}

# Stop a sink and wait until its worker is gone and its slot inactive.
sub stop_settled
{
	my ($src, $dst, $sink) = @_;
	stop_sink($dst, $sink);
	wait_status($dst, $sink, 'not_started', undef, no_early_exit => 1, name => "$sink stopped");
	poll($src, "SELECT count(*) = 0 FROM pg_replication_slots WHERE slot_name = " . lit($sink) . " AND active");
	return;
}

# A source column added to public.$table while its target held rows: wait
# for the halt source_column_added, stop, acknowledge it (the caller made the
# rows agree, or they hold NULL at both ends) and start again
# (docs/reasons.md#source_column_added).
sub acknowledge_column_added
{
	my ($src, $dst, $sink, $table, $label) = @_;
	$label //= $sink;
	wait_status($dst, $sink, 'halted', 'source_column_added', src => $src,
		name => "$label: halted source_column_added");
	stop_settled($src, $dst, $sink);
	my ($sysid, $db) = source_identity($src);
	is($dst->safe_psql($DB, "SELECT ash_replicant_acknowledge_column_added(" . lit($sink) . ", "
			  . lit($sysid) . ", " . lit($db) . ", 'public', " . lit($table) . ")"),
		't', "$label: the added column acknowledged");
	start_sink($dst, $sink);
	return;
}

# Re-deliver everything a sink has applied: stop it, put back the copy of its
# slot taken before the workload ($backup, dropped here), move its watermark
# to 0/0 and start it again.
sub redeliver
{
	my ($src, $dst, $sink, $backup) = @_;
	stop_settled($src, $dst, $sink);
	$src->safe_psql($DB, "SELECT pg_drop_replication_slot(" . lit($sink) . ");"
		  . " SELECT pg_copy_logical_replication_slot(" . lit($backup) . ", " . lit($sink) . ");"
		  . " SELECT pg_drop_replication_slot(" . lit($backup) . ")");
	# the acknowledged position forgotten too, as adopt_checkpoint does: the
	# slot put back was confirmed up to what the erased watermark held
	# (else checkpoint_behind_slot, when it is past the last keepalive's)
	$dst->safe_psql($DB, "UPDATE ash_replicant.checkpoints SET commit_lsn = '0/0', end_lsn = '0/0',"
		  . " acknowledged_lsn = NULL WHERE slot_name = " . lit($sink));
	start_sink($dst, $sink);
	return;
}

##############################################################################
# Faults and workloads
##############################################################################

sub _child_pids
{
	my ($ppid) = @_;
	my @kids;
	for my $stat (glob '/proc/[0-9]*/stat')
	{
		open my $fh, '<', $stat or next;
		my $line = <$fh>;
		close $fh;
		next unless defined $line && $line =~ /^(\d+) \(.*\) \S (\d+) /s;
		push @kids, $1 if $2 == $ppid;
	}
	return @kids;
}

sub _postmaster_pid
{
	my ($node) = @_;
	open my $fh, '<', $node->data_dir . '/postmaster.pid' or return undef;
	my $pid = <$fh>;
	close $fh;
	chomp $pid;
	return $pid;
}

# crash_restart($node): kill -9 the postmaster, let its children notice
# (postmaster death) for up to 5 s, then SIGKILL any left, wait for them to be
# gone, and start the node again (crash recovery).
sub crash_restart
{
	my ($node) = @_;
	my $pm = _postmaster_pid($node);
	my @kids = $pm ? _child_pids($pm) : ();
	$node->kill9;
	my $deadline = time + 5;
	while (grep { kill 0, $_ } @kids)
	{
		if (time > $deadline)
		{
			kill 'KILL', grep { kill 0, $_ } @kids;
			last;
		}
		usleep(50_000);
	}
	$deadline = time + 10;
	usleep(20_000) while (grep { kill 0, $_ } @kids) && time < $deadline;
	$node->start;
	return;
}

# sync_standby($src, $sink, $on): the source waits (or no longer waits) for
# the pipeline as its synchronous standby, named by its replication
# connection's application_name; on, returns whether pg_stat_replication
# shows it as 'sync'.
sub sync_standby
{
	my ($src, $sink, $on) = @_;
	if (!$on)
	{
		$src->safe_psql($DB, 'ALTER SYSTEM RESET synchronous_standby_names');
		$src->safe_psql($DB, 'SELECT pg_reload_conf()');
		return 1;
	}
	$src->safe_psql($DB, "ALTER SYSTEM SET synchronous_standby_names = " . lit(qq{"ash_replicant $sink"}));
	$src->safe_psql($DB, 'SELECT pg_reload_conf()');
	return poll($src, "SELECT sync_state FROM pg_stat_replication WHERE application_name = "
		  . lit("ash_replicant $sink"), 'sync');
}

# provenance_history($dst, $t): "${t}_hist", an SCD2 version table with
# provenance columns of a source table (id bigint PRIMARY KEY, v text, n
# bigint), and "${t}_v", the view of its open versions.
sub provenance_history
{
	my ($dst, $t) = @_;
	$dst->safe_psql($DB, qq{
CREATE TABLE ${t}_hist (
	vid bigserial PRIMARY KEY, id bigint NOT NULL, v text, n bigint,
	valid_from_lsn bigint NOT NULL, valid_to_lsn bigint,
	replica_fingerprint bytea, replica_seen_attempt bytea,
	UNIQUE (id, valid_from_lsn));
CREATE UNIQUE INDEX ${t}_hist_open ON ${t}_hist (id) WHERE valid_to_lsn IS NULL;
CREATE VIEW ${t}_v AS SELECT id, v, n FROM ${t}_hist WHERE valid_to_lsn IS NULL;
});
	return;
}

# copy_under_kills($src, $dst, $sink, %o): an incremental snapshot under
# faults, the source waiting for the pipeline as its synchronous standby.
# Runs workload $o{script} while it kills -9 the destination (and starts it
# again) $o{kills} times, each once the copy has passed a seeded number of
# rows in 800 .. 800 + $o{span} (increasing; none once the attempt
# completed); then runs $o{release} (lifting what held the copy back), and
# checks that the attempt completes, the workload ran, the watermark reaches
# a last tracked commit ($o{last}), the pipeline is healthy with the source
# no longer waiting for it, and the attempt's tables are $o{copied}
# ("table:state,..." by name).  Returns how many kills were made.
sub copy_under_kills
{
	my ($src, $dst, $sink, %o) = @_;
	if (!Test::More::ok(sync_standby($src, $sink, 1), 'the pipeline is the source\'s synchronous standby'))
	{
		# commits would wait for a standby that is not there
		sync_standby($src, $sink, 0);
		diag_pipeline($src, $dst, $sink);
		return 0;
	}
	my $w = start_workload($src, $o{script}, timeout => 600);
	my $faults = 0;
	for my $at (sort { $a <=> $b } map { 800 + int(rand($o{span})) } 1 .. $o{kills})
	{
		poll($dst, "SELECT coalesce(sum(rows_copied), 0) > $at OR bool_and(state = 'copied')"
			  . " FROM ash_replicant.snapshot_tables", 't');
		last if $dst->safe_psql($DB, "SELECT coalesce(snapshot_phase, '') FROM ash_replicant.checkpoints")
		  eq 'complete';
		Test::More::note("fault at >$at rows: destination kill -9");
		crash_restart($dst);
		$faults++;
	}
	Test::More::diag("ash-proof: faults_injected=$faults seed=$o{seed}");
	Test::More::ok($faults >= 1, "the destination was killed during the copy ($faults times)");
	$dst->safe_psql($DB, $o{release}) if $o{release};

	if (!Test::More::ok(poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints", 't',
				timeout => 300), 'the incremental attempt completes'))
	{
		Test::More::diag($dst->safe_psql($DB, "SELECT * FROM ash_replicant_status(" . lit($sink) . ")"));
		sync_standby($src, $sink, 0);	# the workload's commits wait no longer
	}
	Test::More::ok(finish_workload($w), 'workload ran to its end');
	my ($commit) = commit_tracked($src, $o{last});
	Test::More::ok(wait_lsn($src, $dst, $sink, $commit), 'watermark reaches the last source commit');
	sync_standby($src, $sink, 0);
	wait_status($dst, $sink, 'healthy');
	Test::More::is($dst->safe_psql($DB, "SELECT string_agg(source_table || ':' || state, ',' ORDER BY source_table)"
			  . " FROM ash_replicant.snapshot_tables"), $o{copied}, 'every table of the attempt copied');
	return $faults;
}

# terminate_walsender($src, $slot): pg_terminate_backend of the walsender that
# streams $slot; returns the number of backends terminated (0 when idle).
sub terminate_walsender
{
	my ($src, $slot) = @_;
	return $src->safe_psql($DB,
		"SELECT count(*) FILTER (WHERE pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = "
		  . lit($slot) . " AND active_pid IS NOT NULL");
}

# create_brake($dst, $ms): a table brake (ms) and a trigger function
# public.brake_fn() that sleeps brake.ms milliseconds per call: a test's
# trigger on a target slows a copy or an apply down until it sets ms to 0.
sub create_brake
{
	my ($dst, $ms) = @_;
	$dst->safe_psql($DB, qq{
CREATE TABLE public.brake (ms integer NOT NULL);
INSERT INTO public.brake VALUES ($ms);
CREATE FUNCTION public.brake_fn() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS \$\$
BEGIN
	PERFORM pg_catalog.pg_sleep(ms / 1000.0) FROM public.brake;
	RETURN NULL;
END \$\$;
});
	return;
}

# A gate on the destination: close_gate($dst, $table, $id, $lock) makes a
# BEFORE INSERT trigger on $table wait, for the row with id $id, for advisory
# lock $lock, which a background session takes and holds now; the writing
# transaction stays open, uncommitted, until open_gate($gate, $lock).
# where => 'NEW.a = 1 AND NEW.b = 2' picks the row otherwise (keys not named id).
# gate_waiting($dst, $lock): a writer waits at it.
sub close_gate
{
	my ($dst, $table, $id, $lock, %o) = @_;
	my $where = $o{where} // "NEW.id = $id";
	$dst->safe_psql($DB, qq{
CREATE FUNCTION gate_$lock() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog AS \$\$
BEGIN
	IF $where THEN
		PERFORM pg_advisory_xact_lock_shared($lock);
	END IF;
	RETURN NEW;
END \$\$;
CREATE TRIGGER gate_$lock BEFORE INSERT ON $table FOR EACH ROW EXECUTE FUNCTION gate_$lock();
});
	my $gate = $dst->background_psql($DB, on_error_stop => 1);
	$gate->query_safe("SELECT pg_advisory_lock($lock)");
	return $gate;
}

sub gate_waiting
{
	my ($dst, $lock) = @_;
	return poll($dst,
		"SELECT count(*) = 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = $lock AND NOT granted");
}

# Has the (one) walsender sent the source's WAL up to lsn?
sub wait_sent
{
	my ($src, $lsn) = @_;
	return poll($src, "SELECT count(*) = 1 FROM pg_stat_replication WHERE sent_lsn >= '$lsn'");
}

# An incremental copy's chunk 1 of table is held at the gate (lock) and its
# chunk 2 (keys 11..20) read ahead: the source updates key 15 and deletes
# key 17, the walsender sends both, the gate opens; once the attempt is
# complete, the mirror holds the update and not the deleted row (the chunk
# read ahead was read again).  $whose names the read-ahead, $label the table;
# $before_open (optional) runs once both are sent, before the gate opens.
sub change_read_ahead
{
	my ($src, $dst, $sink, $table, $gate, $lock, $label, $whose, $before_open) = @_;
	my (undef, $end) = commit_tracked($src,
		"UPDATE $table SET val = 'after the read-ahead', n = n + 1 WHERE id = 15;"
		  . " DELETE FROM $table WHERE id = 17");
	Test::More::ok(wait_sent($src, $end), 'the walsender has sent the update and the delete');
	$before_open->() if $before_open;
	open_gate($gate, $lock);
	Test::More::ok(poll($dst, "SELECT snapshot_phase = 'complete' FROM ash_replicant.checkpoints"),
		'the incremental attempt completes');
	my ($commit) = commit_tracked($src, "UPDATE $table SET n = n + 1 WHERE id = 99");
	Test::More::ok(wait_lsn($src, $dst, $sink, $commit), 'watermark reaches the last source commit');
	Test::More::is($dst->safe_psql($DB, "SELECT val || '/' || n FROM $table WHERE id = 15"),
		'after the read-ahead/1',
		"${label}key 15 holds the update the stream delivered after $whose read-ahead");
	Test::More::is($dst->safe_psql($DB, "SELECT count(*) FROM $table WHERE id = 17"), '0',
		"${label}key 17 stays deleted");
	return;
}

# The backend types of the sessions waiting at a gate (lock: that one),
# comma-separated.
sub gate_holders
{
	my ($dst, $lock) = @_;
	my $which = defined $lock
	  ? " AND pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = $lock AND NOT granted)"
	  : '';
	return $dst->safe_psql($DB, "SELECT string_agg(backend_type, ',') FROM pg_stat_activity"
		  . " WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'$which");
}

sub open_gate
{
	my ($gate, $lock) = @_;
	$gate->query_safe("SELECT pg_advisory_unlock($lock)");
	$gate->quit;
	return;
}

# start_workload($node, $sql_text, %o): run a SQL script in a background psql
# (ON_ERROR_STOP) with a bounded duration; returns a handle for
# finish_workload().
sub start_workload
{
	my ($node, $sql, %o) = @_;
	my $file = PostgreSQL::Test::Utils::tempdir() . "/workload.sql";
	open my $fh, '>', $file or croak "$file: $!";
	print $fh $sql;
	close $fh;
	my ($out, $err) = ('', '');
	my $timeout = $o{timeout} // 300;
	local %ENV = %ENV;
	$ENV{PGHOST} = $node->host;
	$ENV{PGPORT} = $node->port;
	my $h = IPC::Run::start(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $DB, '-f', $file ],
		'>', \$out, '2>', \$err, IPC::Run::timeout($timeout));
	return { h => $h, out => \$out, err => \$err };
}

sub workload_running
{
	my ($w) = @_;
	return $w->{h}->pumpable;
}

sub finish_workload
{
	my ($w) = @_;
	my $ok = eval { $w->{h}->finish; 1 };
	my $rc = $ok ? $w->{h}->result : -1;
	diag "workload failed (rc=$rc): " . ${ $w->{err} } . ($@ // '') if !$ok || $rc != 0;
	return $ok && $rc == 0;
}

# A loopback TCP proxy 127.0.0.1:$listen -> 127.0.0.1:$target: a forked
# single-process forwarder.  A pipeline configured to reach its source
# through it loses every connection at once when stop_proxy() kills it
# (a network cut); start_proxy() on the same port restores the path.
sub _proxy_child
{
	my ($listen, $target) = @_;
	my $l;
	for (1 .. 100)
	{
		$l = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $listen,
			Listen => 32, ReuseAddr => 1, Proto => 'tcp');
		last if $l;
		usleep(50_000);
	}
	POSIX::_exit(2) unless $l;
	my $sel = IO::Select->new($l);
	my %peer;
	my $drop = sub {
		my ($fh) = @_;
		my $o = $peer{ fileno($fh) // -1 };
		for my $x (grep { defined } $fh, $o)
		{
			my $fd = fileno($x);
			next unless defined $fd;
			delete $peer{$fd};
			$sel->remove($x);
			close $x;
		}
	};
	while (1)
	{
		for my $fh ($sel->can_read(1))
		{
			if ($fh == $l)
			{
				my $c = $l->accept or next;
				my $u = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $target, Proto => 'tcp');
				unless ($u) { close $c; next; }
				$peer{ fileno($c) } = $u;
				$peer{ fileno($u) } = $c;
				$sel->add($c, $u);
				next;
			}
			my $o = $peer{ fileno($fh) };
			my $buf;
			my $n = sysread($fh, $buf, 65536);
			if (!$n || !$o)
			{
				$drop->($fh);
				next;
			}
			my $off = 0;
			while ($off < $n)
			{
				my $w = syswrite($o, $buf, $n - $off, $off);
				unless (defined $w) { $drop->($fh); last; }
				$off += $w;
			}
		}
	}
}

# start_proxy($listen_port, $target_port) -> pid, once the proxy accepts.
# The caller kills it at the end (an END block), or it outlives the test.
sub start_proxy
{
	my ($listen, $target) = @_;
	my $pid = fork();
	croak "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		# never run the parent's END blocks, never hold the TAP output open
		open STDOUT, '>', '/dev/null';
		open STDERR, '>', '/dev/null';
		eval { _proxy_child($listen, $target) };
		POSIX::_exit(1);
	}
	for (1 .. 200)
	{
		my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $listen, Proto => 'tcp');
		if ($s) { close $s; return $pid; }
		usleep(25_000);
	}
	croak "proxy on port $listen did not start";
}

sub stop_proxy
{
	my ($pid) = @_;
	kill 'KILL', $pid;
	waitpid($pid, 0);
	return;
}

1;
