#ifndef DEVACCESS_CPAM_SHIM_H
#define DEVACCESS_CPAM_SHIM_H
#include <stdlib.h>
#include <string.h>
#include <security/pam_appl.h>

/* PAM's conversation is a C callback that hands back malloc'd answers; keeping it
   here spares Swift from building C arrays of C structs. It answers every
   no-echo prompt (the password) with the given secret and every echoed prompt
   (a user name) with the user; informational messages get no answer. */
static int devaccess_pam_conversation(int count, const struct pam_message **messages,
                                      struct pam_response **responses, void *context) {
    const char *const *answers = (const char *const *)context; /* [password, user] */
    if (count <= 0 || count > PAM_MAX_NUM_MSG) return PAM_CONV_ERR;
    struct pam_response *reply = calloc((size_t)count, sizeof(*reply));
    if (reply == NULL) return PAM_BUF_ERR;
    for (int i = 0; i < count; i++) {
        const char *answer = NULL;
        switch (messages[i]->msg_style) {
        case PAM_PROMPT_ECHO_OFF: answer = answers[0]; break;
        case PAM_PROMPT_ECHO_ON: answer = answers[1]; break;
        default: break;
        }
        if (answer != NULL && (reply[i].resp = strdup(answer)) == NULL) {
            for (int j = 0; j < i; j++) free(reply[j].resp);
            free(reply);
            return PAM_BUF_ERR;
        }
    }
    *responses = reply;
    return PAM_SUCCESS;
}

/* Runs the service's auth and account stacks for `user` with `password`.
   Returns a PAM status code; on failure *stage names the step ("start",
   "authenticate", "account"). */
static inline int devaccess_pam_verify(const char *service, const char *user, const char *password,
                                       const char **stage) {
    const char *answers[2] = { password, user };
    struct pam_conv conversation = { devaccess_pam_conversation, (void *)answers };
    pam_handle_t *handle = NULL;
    int r = pam_start(service, user, &conversation, &handle);
    if (r != PAM_SUCCESS) { *stage = "start"; return r; }
    r = pam_authenticate(handle, PAM_DISALLOW_NULL_AUTHTOK);
    if (r != PAM_SUCCESS) {
        *stage = "authenticate";
    } else {
        r = pam_acct_mgmt(handle, PAM_DISALLOW_NULL_AUTHTOK);
        if (r != PAM_SUCCESS) *stage = "account";
    }
    pam_end(handle, r);
    return r;
}

static inline const char *devaccess_pam_strerror(int code) { return pam_strerror(NULL, code); }
#endif
