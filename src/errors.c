/*-------------------------------------------------------------------------
 *
 * errors.c
 *	  Reason codes (README.md#reason-codes) and value-free error reporting.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/table.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "errors.h"
#include "sqlstate_names.h"

typedef struct AshReasonEntry
{
	const char *code;
	AshReasonClass cls;
} AshReasonEntry;

static const AshReasonEntry reason_table[] = {
	/* halts */
	{"tenant_required", ASH_REASON_HALTED},
	{"tenant_resolution_failed", ASH_REASON_HALTED},
	{"tenant_scope_missing", ASH_REASON_HALTED},
	{"tenant_conflict", ASH_REASON_HALTED},
	{"tenant_scope_invalid", ASH_REASON_HALTED},
	{"source_identity_mismatch", ASH_REASON_HALTED},
	{"message_prefix_unmapped", ASH_REASON_HALTED},
	{"append_origin_gap", ASH_REASON_HALTED},
	{"append_frontier_divergent", ASH_REASON_HALTED},
	{"census_unverifiable", ASH_REASON_HALTED},
	{"census_drift", ASH_REASON_HALTED},
	{"apply_failed", ASH_REASON_HALTED},
	{"owner_lost", ASH_REASON_HALTED},
	/* the worker died again and again applying one change (pipeline.c) */
	{"apply_crash_loop", ASH_REASON_HALTED},
	{"pipeline_terminated", ASH_REASON_HALTED},
	{"retention_lost", ASH_REASON_HALTED},
	{"checkpoint_behind_slot", ASH_REASON_HALTED},
	/* the slot is gone from the source under a watermark (pipeline.c) */
	{"source_slot_missing", ASH_REASON_HALTED},
	{"snapshot_state_invalid", ASH_REASON_HALTED},
	{"snapshot_scope_incomplete", ASH_REASON_HALTED},
	{"snapshot_contention_exhausted", ASH_REASON_HALTED},
	{"keyring_version_missing", ASH_REASON_HALTED},
	{"ciphertext_invalid", ASH_REASON_HALTED},
	{"digest_key_horizon_violated", ASH_REASON_HALTED},
	{"digest_key_witness_invalid", ASH_REASON_HALTED},
	{"message_claim_conflict", ASH_REASON_HALTED},
	{"message_content_invalid", ASH_REASON_HALTED},
	{"decoder_table_missing", ASH_REASON_HALTED},
	{"decoder_extension_missing", ASH_REASON_HALTED},
	{"decoder_table_keyless", ASH_REASON_HALTED},
	/* wal2json: a change that fits no description of its table (pipeline.c) */
	{"decoder_schema_drift", ASH_REASON_HALTED},
	/* wal2json: null for a float/numeric, also NaN and Infinity (pipeline.c) */
	{"decoder_value_ambiguous", ASH_REASON_HALTED},
	/* the source cannot send a value in the destination's encoding (pipeline.c) */
	{"source_value_unrepresentable", ASH_REASON_HALTED},
	{"delivery_config_invalid", ASH_REASON_HALTED},
	{"unchanged_value_unavailable", ASH_REASON_HALTED},
	{"tombstone_unknown", ASH_REASON_HALTED},
	{"protocol_violation", ASH_REASON_HALTED},
	{"source_truncate", ASH_REASON_HALTED},
	/* a mapped table left the publication and came back, no snapshot (census.c) */
	{"publication_gap", ASH_REASON_HALTED},
	/* a trigger on a state mirror's target kept a write out (apply_scd1.c) */
	{"destination_write_suppressed", ASH_REASON_HALTED},
	/* a written source column added while the target holds rows (source_columns.c) */
	{"source_column_added", ASH_REASON_HALTED},
	{"source_publication_missing", ASH_REASON_MISCONFIGURED},
	{"mapping_unsupported", ASH_REASON_MISCONFIGURED},
	{"destination_table_missing", ASH_REASON_MISCONFIGURED},
	/* misconfigured */
	{"source_table_unmapped", ASH_REASON_MISCONFIGURED},
	{"source_column_unmapped", ASH_REASON_MISCONFIGURED},
	{"source_column_missing", ASH_REASON_MISCONFIGURED},
	{"source_type_invalid", ASH_REASON_MISCONFIGURED},
	{"source_replica_identity", ASH_REASON_MISCONFIGURED},
	{"source_key_not_unique", ASH_REASON_MISCONFIGURED},
	{"ignore_collides_with_mapping", ASH_REASON_MISCONFIGURED},
	{"checkpoint_identity_conflict", ASH_REASON_MISCONFIGURED},
	{"source_timeline_changed", ASH_REASON_MISCONFIGURED},
	{"checkpoint_ahead_of_source", ASH_REASON_MISCONFIGURED},
	{"snapshot_history_ahead", ASH_REASON_MISCONFIGURED},
	{"contract_incompatible", ASH_REASON_MISCONFIGURED},
	{"publication_contract_incompatible", ASH_REASON_MISCONFIGURED},
	{"decoder_contract_incompatible", ASH_REASON_MISCONFIGURED},
	{"source_release_unsupported", ASH_REASON_MISCONFIGURED},
	{"keyring_missing_family", ASH_REASON_MISCONFIGURED},
	{"keyring_invalid", ASH_REASON_MISCONFIGURED},
	{"retention_below_recovery_horizon", ASH_REASON_MISCONFIGURED},
	/* also refused at configuration; the worker halts on a stored one (route_rules.c) */
	{"message_route_invalid", ASH_REASON_MISCONFIGURED},
	{"recovery_horizon_invalid", ASH_REASON_MISCONFIGURED},
	{"initial_state_mismatch", ASH_REASON_MISCONFIGURED},
	{"decoder_capability_unsupported", ASH_REASON_MISCONFIGURED},
	{"append_frontier_unavailable", ASH_REASON_MISCONFIGURED},
	{"source_slot_in_use", ASH_REASON_MISCONFIGURED},
	{"source_not_logical", ASH_REASON_MISCONFIGURED},
	{"source_slots_disabled", ASH_REASON_MISCONFIGURED},
	{"source_unreachable", ASH_REASON_MISCONFIGURED},
	{"privilege_replication_missing", ASH_REASON_MISCONFIGURED},
	{"source_connection_invalid", ASH_REASON_MISCONFIGURED},
	{"source_authentication_failed", ASH_REASON_MISCONFIGURED},
	/* a password the source did not ask for, or none set by a non-superuser */
	{"source_password_required", ASH_REASON_MISCONFIGURED},
	{"destination_owner_invalid", ASH_REASON_MISCONFIGURED},
	/* a written table's owner and the sink owner trust neither (owner_scope.c) */
	{"target_owner_untrusted", ASH_REASON_MISCONFIGURED},
	/* registration / configuration rejections */
	{"multitenancy_required", ASH_REASON_REGISTRATION},
	{"tenant_attribute_invalid", ASH_REASON_REGISTRATION},
	{"sensitive_unprotected", ASH_REASON_REGISTRATION},
	{"destination_not_local", ASH_REASON_REGISTRATION},
	{"history_invalid", ASH_REASON_REGISTRATION},
	{"append_log_invalid", ASH_REASON_REGISTRATION},
	{"sink_kind_mixed", ASH_REASON_REGISTRATION},
	{"snapshot_unsupported", ASH_REASON_REGISTRATION},
	{"snapshot_provenance_invalid", ASH_REASON_REGISTRATION},
	{"census_options_invalid", ASH_REASON_REGISTRATION},
	{"ignore_invalid", ASH_REASON_REGISTRATION},
	{"slot_name_invalid", ASH_REASON_REGISTRATION},
	{"config_invalid", ASH_REASON_REGISTRATION},
	{"decrypt_binding_invalid", ASH_REASON_REGISTRATION},
	{"pipeline_running", ASH_REASON_REGISTRATION},
	/* doctor / preflight */
	{"source_probe_failed", ASH_REASON_DOCTOR},
	{"privilege_select_missing", ASH_REASON_DOCTOR},
	{"privilege_probe_missing", ASH_REASON_DOCTOR},
	{"checkpoint_state_unknown", ASH_REASON_DOCTOR},
	{"retention_at_risk", ASH_REASON_DOCTOR},
	{"ignore_never_matches", ASH_REASON_DOCTOR},
	{"extension_version_mismatch", ASH_REASON_MISCONFIGURED},	/* also a halt */
	{"mapping_never_matches", ASH_REASON_DOCTOR},
	{"target_column_narrower", ASH_REASON_DOCTOR},
	/* a state mirror's target has a BEFORE ROW INSERT or UPDATE trigger (api_doctor.c) */
	{"target_before_row_trigger", ASH_REASON_DOCTOR},
	{"go_forward_rows_not_copied", ASH_REASON_DOCTOR},
	{"go_forward_foreign_key", ASH_REASON_DOCTOR},
	{"library_not_preloaded", ASH_REASON_DOCTOR},
	{"launcher_not_running", ASH_REASON_DOCTOR},
	{"launcher_database_mismatch", ASH_REASON_DOCTOR},
	/* source refuses the decoder's output plugin (output_plugin_libraries) */
	{"decoder_plugin_not_allowed", ASH_REASON_MISCONFIGURED},
	/* ash_replicant_verify (docs/operations.md#verifying-completeness) */
	{"verify_pipeline_not_running", ASH_REASON_DOCTOR},
	{"verify_timeout", ASH_REASON_DOCTOR},
	{"verify_rows_differ", ASH_REASON_DOCTOR},
	{"verify_keys_differ", ASH_REASON_DOCTOR},
	{"verify_values_differ", ASH_REASON_DOCTOR},
	{"verify_append_log", ASH_REASON_DOCTOR},
	{"verify_tenant_scopes_unknown", ASH_REASON_DOCTOR},
	/* recovery refusals */
	{"history_redelivery_unsafe", ASH_REASON_REGISTRATION},
	{"checkpoint_missing", ASH_REASON_REGISTRATION},
	/* update and rollback refusals (docs/operations.md, "Upgrading from 0.4.0") */
	{"pipelines_stopped_required", ASH_REASON_REGISTRATION},
	{"legacy_binding_missing", ASH_REASON_REGISTRATION},
	{"legacy_binding_ambiguous", ASH_REASON_REGISTRATION},
	{"legacy_binding_shared", ASH_REASON_REGISTRATION},
	{"legacy_binding_foreign", ASH_REASON_REGISTRATION},
	{"legacy_binding_invalid", ASH_REASON_REGISTRATION},
	{"rollback_state_unrepresentable", ASH_REASON_REGISTRATION},
	{"rollback_ledger_mismatch", ASH_REASON_REGISTRATION},
	/* waits for a resource, shown with catching_up (docs/operations.md#many-pipelines) */
	{"pipeline_slots_exhausted", ASH_REASON_WAITING},
	{"worker_processes_exhausted", ASH_REASON_WAITING},
	{"destination_origin_limit", ASH_REASON_WAITING},
	{"source_connection_limit", ASH_REASON_WAITING},
	{"source_slot_limit", ASH_REASON_WAITING},
	/* the source ends the stream with an error again and again (pipeline.c) */
	{"source_stream_failing", ASH_REASON_WAITING},
	/* the worker waits for a lock on a target (api_status.c) */
	{"destination_lock_wait", ASH_REASON_WAITING},
	/* the source creates the worker's slot, waiting for transactions (api_status.c) */
	{"source_slot_wait", ASH_REASON_WAITING},
	/* the slot is active for another session, retried (pipeline.c) */
	{"source_slot_busy", ASH_REASON_WAITING},
	/* a snapshot's COPY waits for a lock at the source (snapshot.c) */
	{"source_lock_wait", ASH_REASON_WAITING},
	/* a transient destination error on every attempt (pipeline.c) */
	{"destination_apply_retrying", ASH_REASON_WAITING},
	/* enabled in another installation: restored, waits for a start (api_status.c) */
	{"destination_restored", ASH_REASON_NOT_STARTED},
};

AshReasonClass
ash_reason_class(const char *reason)
{
	if (reason == NULL)
		return ASH_REASON_UNKNOWN;
	for (int i = 0; i < lengthof(reason_table); i++)
	{
		if (strcmp(reason_table[i].code, reason) == 0)
			return reason_table[i].cls;
	}
	return ASH_REASON_UNKNOWN;
}

const char *
ash_sqlstate_condition(const char *sqlstate)
{
	if (sqlstate == NULL || strlen(sqlstate) != 5)
		return NULL;
	for (int i = 0; i < lengthof(ash_sqlstate_names); i++)
	{
		if (memcmp(ash_sqlstate_names[i].sqlstate, sqlstate, 5) == 0)
			return ash_sqlstate_names[i].name;
	}
	return NULL;
}

const char *
ash_reason_class_name(AshReasonClass cls)
{
	switch (cls)
	{
		case ASH_REASON_HALTED:
			return "halted";
		case ASH_REASON_MISCONFIGURED:
			return "misconfigured";
		case ASH_REASON_REGISTRATION:
			return "registration";
		case ASH_REASON_DOCTOR:
			return "doctor";
		case ASH_REASON_WAITING:
			return "waiting";
		case ASH_REASON_NOT_STARTED:
			return "not_started";
		case ASH_REASON_UNKNOWN:
			break;
	}
	return "unknown";
}

/*
 * The pending halt's reason and context, copied: a reason handed over from
 * shared memory (a helper copier's end) may be cleared before the halt is
 * handled.
 */
static char pending_reason[64];
static char pending_context[256];
static char pending_target[4 * NAMEDATALEN + 8];
const char *ash_pending_halt = NULL;
const char *ash_pending_halt_context = "";
const char *ash_pending_halt_target = NULL;

/* both parts quoted, each quote doubled */
static char opening_target[2 * (2 * NAMEDATALEN + 2) + 2];
const char *ash_opening_target = NULL;

Relation
ash_open_target(Oid relid, LOCKMODE lockmode, bool missing_ok)
{
	char	   *relname = get_rel_name(relid);
	char	   *nspname = get_namespace_name(get_rel_namespace(relid));
	Relation	r;

	/* looked up unlocked: a name to report, nothing decided by it */
	ash_opening_target = NULL;
	if (relname != NULL && nspname != NULL)
	{
		strlcpy(opening_target, quote_qualified_identifier(nspname, relname),
				sizeof(opening_target));
		ash_opening_target = opening_target;
	}
	r = missing_ok ? try_relation_open(relid, lockmode) : table_open(relid, lockmode);
	ash_opening_target = NULL;
	return r;
}

/* Format a structural context string (never values). */
static char *format_context(const char *ctxfmt, va_list args_in) pg_attribute_printf(1, 0);

static char *
format_context(const char *ctxfmt, va_list args_in)
{
	StringInfoData ctx;

	initStringInfo(&ctx);
	if (ctxfmt == NULL)
		return ctx.data;
	for (;;)
	{
		va_list		args;
		int			needed;

		va_copy(args, args_in);
		needed = appendStringInfoVA(&ctx, ctxfmt, args);
		va_end(args);
		if (needed == 0)
			break;
		enlargeStringInfo(&ctx, needed);
	}
	return ctx.data;
}

static void raise_halt(const char *target, const char *reason, char *ctx) pg_attribute_noreturn();

static void
raise_halt(const char *target, const char *reason, char *ctx)
{
	strlcpy(pending_reason, reason, sizeof(pending_reason));
	strlcpy(pending_context, ctx, sizeof(pending_context));
	ash_pending_halt = pending_reason;
	ash_pending_halt_context = pending_context;
	if (target != NULL)
	{
		strlcpy(pending_target, target, sizeof(pending_target));
		ash_pending_halt_target = pending_target;
	}
	else
		ash_pending_halt_target = NULL;
	if (ctx[0] != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ash_replicant: pipeline halted: %s (%s)", reason, ctx)));
	else
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ash_replicant: pipeline halted: %s", reason)));
	pg_unreachable();
}

void
ash_halt(const char *reason, const char *ctxfmt,...)
{
	va_list		args;
	char	   *ctx;

	va_start(args, ctxfmt);
	ctx = format_context(ctxfmt, args);
	va_end(args);
	raise_halt(NULL, reason, ctx);
}

void
ash_halt_on(const char *target, const char *reason, const char *ctxfmt,...)
{
	va_list		args;
	char	   *ctx;

	va_start(args, ctxfmt);
	ctx = format_context(ctxfmt, args);
	va_end(args);
	raise_halt(target, reason, ctx);
}

/* ash_reject_as_halt(): while set, a rejection is this halt */
static const char *reject_halt_reason = NULL;
static const char *reject_halt_subject = NULL;
static bool reject_halt_withhold = false;

void
ash_reject_as_halt(const char *halt_reason, const char *subject, bool withhold)
{
	reject_halt_reason = halt_reason;
	reject_halt_subject = subject;
	reject_halt_withhold = withhold;
}

void
ash_reject(int sqlerrcode, const char *stage, const char *reason,
		   const char *ctxfmt,...)
{
	va_list		args;
	char	   *ctx;

	va_start(args, ctxfmt);
	ctx = format_context(ctxfmt, args);
	va_end(args);

	if (reject_halt_reason != NULL)
	{
		const char *halt_reason = reject_halt_reason;

		reject_halt_reason = NULL;
		if (ctx[0] != '\0' && !reject_halt_withhold)
			ash_halt(halt_reason, "%s: %s (%s)", reject_halt_subject, reason, ctx);
		ash_halt(halt_reason, "%s: %s", reject_halt_subject, reason);
	}
	if (ctx[0] != '\0')
		ereport(ERROR,
				(errcode(sqlerrcode),
				 errmsg("ash_replicant: %s rejected: %s (%s)", stage, reason, ctx)));
	else
		ereport(ERROR,
				(errcode(sqlerrcode),
				 errmsg("ash_replicant: %s rejected: %s", stage, reason)));
	pg_unreachable();
}

bool
ash_in_extension_worker(void)
{
	return IsBackgroundWorker && MyBgworkerEntry != NULL &&
		strcmp(MyBgworkerEntry->bgw_library_name, "ash_replicant") == 0;
}

void
ash_refuse(int sqlerrcode, const char *stage, const char *reason, const char *ctxfmt,...)
{
	va_list		args;
	char	   *ctx;

	va_start(args, ctxfmt);
	ctx = format_context(ctxfmt, args);
	va_end(args);
	if (ash_in_extension_worker())
		ash_halt(reason, "%s", ctx);
	ash_reject(sqlerrcode, stage, reason, "%s", ctx);
}

void
ash_append_quoted_name(StringInfo buf, const char *name)
{
	appendStringInfoChar(buf, '"');
	for (const char *p = name; *p; p++)
	{
		if (*p == '"')
			appendStringInfoChar(buf, '"');
		appendStringInfoChar(buf, *p);
	}
	appendStringInfoChar(buf, '"');
}

char *
ash_quoted_name(const char *name)
{
	StringInfoData buf;

	initStringInfo(&buf);
	ash_append_quoted_name(&buf, name);
	return buf.data;
}

/*
 * PostgreSQL adds the text of the SPI statement running to the context of
 * any message raised under it -- a lock wait it logs (log_lock_waits), a
 * trigger's RAISE WARNING -- and our workers' statements name tables in
 * tenants' schemas (context tenancy): a tenant in a log line.  In our
 * background workers that text is withheld, the rest of the context kept;
 * so is an internal query's.
 */
static emit_log_hook_type prev_emit_log_hook = NULL;

#define STATEMENT_OPENING "SQL statement \""

static char *
withhold_statements(const char *context)
{
	StringInfoData out;
	const char *line = context;
	bool		inside = false;

	initStringInfo(&out);
	while (*line)
	{
		const char *end = strchr(line, '\n');
		size_t		len = end ? (size_t) (end - line) : strlen(line);

		if (!inside && strncmp(line, STATEMENT_OPENING, strlen(STATEMENT_OPENING)) == 0)
		{
			appendStringInfo(&out, "%sSQL statement of ash_replicant (its text withheld)",
							 out.len > 0 ? "\n" : "");
			inside = true;
		}
		else if (!inside)
			appendStringInfo(&out, "%s%.*s", out.len > 0 ? "\n" : "", (int) len, line);
		/* the statement's text ends with the quote closing its line */
		if (inside && len > 0 && line[len - 1] == '"')
			inside = false;
		line += len + (end ? 1 : 0);
	}
	return out.data;
}

static void
withhold_statement_text(ErrorData *edata)
{
	if (MyBgworkerEntry != NULL &&
		strcmp(MyBgworkerEntry->bgw_library_name, "ash_replicant") == 0)
	{
		/*
		 * The texts replaced are freed: they live in ErrorContext, which a
		 * worker that logs without erroring does not reset for hours.
		 */
		if (edata->context != NULL && strstr(edata->context, STATEMENT_OPENING) != NULL)
		{
			char	   *context = edata->context;

			edata->context = withhold_statements(context);
			pfree(context);
		}
		if (edata->internalquery != NULL)
			pfree(edata->internalquery);
		edata->internalquery = NULL;
		edata->internalpos = 0;
	}
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

void
ash_errors_install_log_hook(void)
{
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = withhold_statement_text;
}
